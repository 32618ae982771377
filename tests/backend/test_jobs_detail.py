"""One job: its detail, changing its priority, downloading its log."""

from __future__ import annotations

import pytest

from backend.jobs.models import JobStatus
from tests.backend.jobs_support import job_url, make_job

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


@pytest.mark.parametrize("role", ["vc_admin", "staff"])
def test_admin_changes_a_jobs_priority(world, role):
    job = make_job(world)

    response = world.client(getattr(world, role)).patch(
        job_url(job), {"priority": 7}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert response.json()["priority"] == 7
    job.refresh_from_db()
    assert job.priority == 7


def test_member_cannot_change_their_jobs_priority(world):
    job = make_job(world)

    response = world.client(world.member).patch(job_url(job), {"priority": 7}, format="json")

    assert response.status_code == 403
    assert response.json()["detail"] == "Only an admin of VC vision can change priorities."
    job.refresh_from_db()
    assert job.priority == 0


def test_other_tenant_cannot_find_the_job_to_change_its_priority(world):
    job = make_job(world)

    response = world.client(world.outsider).patch(job_url(job), {"priority": 7}, format="json")

    assert response.status_code == 404


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
