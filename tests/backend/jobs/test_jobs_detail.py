"""One job: its detail, changing its priority, downloading its log."""

from __future__ import annotations

import pytest

from backend.jobs.models import JobStatus
from tests.backend.jobs_support import JOBS, job_url, make_job
from tests.backend.resources import ResourceTests

pytestmark = pytest.mark.django_db


def test_detail_answers_names_not_database_ids(world):
    job = make_job(world, name="resnet", workers=2, gpus_per_worker=4)

    answer = world.client(world.member).get(job_url(job)).json()

    assert answer["id"] == job.job_id
    assert (answer["name"], answer["owner"], answer["vc"], answer["gpu_type"]) == (
        "resnet",
        "mia",
        "vision",
        "A100",
    )
    assert (answer["workers"], answer["gpus_per_worker"]) == (2, 4)


def test_unknown_job_is_not_found(world):
    response = world.client(world.staff).get("/api/v1/jobs/nosuchjob1/")

    assert response.status_code == 404


# --- Priority ------------------------------------------------------------------------------


class TestChangingAJobsPriority(ResourceTests):
    """Admins change a job's priority; its member owner may not, another tenant cannot find it."""

    url = JOBS
    expected = {
        "update": {"vc_admin": 200, "cluster_admin": 200, "member": 403, "other_vc_member": 404}
    }

    @pytest.fixture
    def resource(self, world):
        return make_job(world)

    def detail_url(self, job) -> str:
        return job_url(job)

    def body(self, action, job):
        return {"priority": 7}

    def check(self, action, role, user, response, job) -> None:
        job.refresh_from_db()
        if response.status_code == 200:
            assert response.json()["priority"] == 7
            assert job.priority == 7
        elif response.status_code == 403:
            assert response.json()["detail"] == (
                "Only an admin of VC vision can change a job's priority, wall time or retries."
            )
            assert job.priority == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"priority": 101}, "less than or equal to 100"),
        ({"priority": "high"}, "valid integer"),
        ({}, "required"),
    ],
)
def test_invalid_priority_is_a_bad_request(world, body, message):
    job = make_job(world)

    response = world.client(world.vc_admin).patch(job_url(job), body, format="json")

    assert response.status_code == 400
    assert message in response.json()["priority"][0]


@pytest.mark.parametrize("role", ["vc_admin", "staff"])
def test_admin_changes_a_jobs_wall_time_and_retries_and_it_is_recorded(world, role):
    job = make_job(world, status=JobStatus.RUNNING, max_wall_time=7 * 24 * 3600, max_retries=3)

    response = world.client(getattr(world, role)).patch(
        job_url(job), {"max_wall_time": 2 * 3600, "max_retries": 0}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert (response.json()["max_wall_time"], response.json()["max_retries"]) == (7200, 0)
    job.refresh_from_db()
    assert (job.max_wall_time, job.max_retries, job.status) == (7200, 0, JobStatus.RUNNING)
    event = job.events.last()
    assert (event.actor, event.from_status, event.to_status) == (
        getattr(world, role), JobStatus.RUNNING, JobStatus.RUNNING,
    )  # fmt: skip
    assert event.reason == "changed: wall time 7 d -> 2 h; retries 3 -> 0"


def test_a_wall_time_past_the_vcs_limit_is_refused_in_its_words(world):
    job = make_job(world)

    response = world.client(world.vc_admin).patch(
        job_url(job), {"max_wall_time": 8 * 24 * 3600, "max_retries": 50}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "max_wall_time": [
            "VC vision allows at most 7 d (604800 seconds); asked for 8 d (691200 seconds)."
        ],
        "max_retries": ["Ensure this value is less than or equal to 20."],
    }


def test_a_member_cannot_change_their_jobs_wall_time_nor_an_ended_job_change(world):
    job = make_job(world)
    refused = world.client(world.member).patch(job_url(job), {"max_wall_time": 600}, format="json")
    assert refused.status_code == 403

    ended = make_job(world, status=JobStatus.FINISHED)
    conflict = world.client(world.vc_admin).patch(job_url(ended), {"max_retries": 1}, format="json")
    assert conflict.status_code == 409
    assert "has ended (finished): nothing to change" in conflict.json()["detail"]


def test_jobs_cannot_be_replaced_or_deleted(world):
    job = make_job(world)
    client = world.client(world.staff)

    assert client.put(job_url(job), {"priority": 7}, format="json").status_code == 405
    assert client.delete(job_url(job)).status_code == 405
    job.refresh_from_db()
    assert job.priority == 0


# --- Log -----------------------------------------------------------------------------------


@pytest.fixture
def log_dir(settings, tmp_path):
    settings.TRAINYARD_LOG_DIR = tmp_path
    return tmp_path


def write_logs(log_dir, job, logs: dict[str, str]) -> None:
    (log_dir / job.job_id).mkdir()
    for name, text in logs.items():
        (log_dir / job.job_id / name).write_text(text)


def download(client, job) -> tuple[object, str]:
    response = client.get(job_url(job, "log"))
    assert response.status_code == 200
    return response, b"".join(response.streaming_content).decode()


def test_job_without_a_log_says_so(world, log_dir):
    job = make_job(world)

    response = world.client(world.member).get(job_url(job, "log"))

    assert response.status_code == 404
    assert response.json() == {
        "detail": f"Job {job.job_id} has no log yet; it appears once the job starts."
    }


def test_log_of_one_worker_is_downloaded_as_is(world, log_dir):
    job = make_job(world, status=JobStatus.RUNNING)
    write_logs(log_dir, job, {"worker-0.log": "epoch 1\nepoch 2\n"})

    response, text = download(world.client(world.member), job)

    assert text == "epoch 1\nepoch 2\n"
    assert response["Content-Disposition"] == f'attachment; filename="{job.job_id}.log"'
    assert response["Content-Type"].startswith("text/plain")


def test_log_of_several_workers_comes_in_rank_order(world, log_dir):
    job = make_job(world, status=JobStatus.FINISHED, workers=11)
    write_logs(
        log_dir,
        job,
        {"worker-10.log": "ten\n", "worker-1.log": "one\n", "worker-0.log": "zero\n"},
    )

    _, text = download(world.client(world.member), job)

    assert text == (
        "==> worker-0.log <==\nzero\n==> worker-1.log <==\none\n==> worker-10.log <==\nten\n"
    )


def test_vc_admin_downloads_a_members_log(world, log_dir):
    job = make_job(world, status=JobStatus.RUNNING)
    write_logs(log_dir, job, {"worker-0.log": "hello\n"})

    _, text = download(world.client(world.vc_admin), job)

    assert text == "hello\n"


# --- Live tail -----------------------------------------------------------------------------


def tail(client, job, **query) -> dict:
    response = client.get(job_url(job, "log/tail"), query)
    assert response.status_code == 200, response.content
    return response.json()


def test_following_a_log_answers_only_what_was_written_since(world, log_dir):
    job = make_job(world, status=JobStatus.RUNNING)
    write_logs(log_dir, job, {"worker-0.log": "epoch 1\n"})
    client = world.client(world.member)

    first = tail(client, job)
    with open(log_dir / job.job_id / "worker-0.log", "a") as log:
        log.write("epoch 2\n")
    second = tail(client, job, offset=first["next_offset"])
    third = tail(client, job, offset=second["next_offset"])

    assert (first["text"], second["text"], third["text"]) == ("epoch 1\n", "epoch 2\n", "")
    assert not third["complete"]  # the job is still running


def test_the_tail_of_a_long_log_starts_at_a_line(world, log_dir):
    job = make_job(world, status=JobStatus.FINISHED)
    write_logs(log_dir, job, {"worker-0.log": "".join(f"line {n}\n" for n in range(1000))})

    answer = tail(world.client(world.member), job, max_bytes=30)

    assert answer["text"] == "line 997\nline 998\nline 999\n"
    assert answer["complete"]


def test_a_chunk_never_splits_a_character(world, log_dir):
    job = make_job(world, status=JobStatus.RUNNING)
    write_logs(log_dir, job, {"worker-0.log": "loss ≈ 0.5\n"})
    client = world.client(world.member)

    first = tail(client, job, offset=0, max_bytes=6)  # "loss " and the first byte of "≈"
    rest = tail(client, job, offset=first["next_offset"])

    assert first["text"] + rest["text"] == "loss ≈ 0.5\n"
    assert "\ufffd" not in first["text"] + rest["text"]


def test_tail_of_a_worker_the_job_does_not_have_is_a_field_error(world, log_dir):
    job = make_job(world, status=JobStatus.RUNNING)

    response = world.client(world.member).get(job_url(job, "log/tail"), {"worker": 5})

    assert response.status_code == 400
    assert "worker" in response.json()


def test_another_tenant_cannot_follow_the_log(world, log_dir):
    job = make_job(world, status=JobStatus.RUNNING)
    write_logs(log_dir, job, {"worker-0.log": "secret\n"})

    response = world.client(world.outsider).get(job_url(job, "log/tail"))

    assert response.status_code == 404
