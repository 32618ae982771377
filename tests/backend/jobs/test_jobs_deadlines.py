"""Deadlines that scale (issue 34): a throughput curve and the work at submit, declared or
learned from earlier runs' metrics lines, and the admission answer the VC acts on."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from backend.jobs import forecast
from backend.jobs.models import Job, JobStatus
from backend.jobs.snapshot import load_snapshot
from backend.vcs.models import InfeasibleDeadlines
from tests.backend.jobs_support import JOBS, OMIT, make_job, submit

pytestmark = pytest.mark.django_db

LINEAR = [100.0, 200.0, 300.0, 400.0]


def in_seconds(seconds: float) -> str:
    return (timezone.now() + timedelta(seconds=seconds)).isoformat()


def deadline_job(client, seconds: float, samples: float, **fields):
    fields = {"throughput": LINEAR, "work": samples} | fields
    return submit(
        client,
        command="torchrun train.py --resume",
        gpus_per_worker=1,
        min_workers=1,
        max_workers=4,
        deadline=in_seconds(seconds),
        **fields,
    )


def seconds_from_now(when: str) -> float:
    return (datetime.fromisoformat(when) - timezone.now()).total_seconds()


def test_a_deadline_it_can_meet_is_answered_with_its_share(world):
    # 250 000 samples in an hour: 70 samples/s, one worker of LINEAR.
    response = deadline_job(world.client(world.member), 3600, 250_000)

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["admission"], answer["admission_share"]) == ("meets", 1)
    # An idle cluster: four workers from now, 625 s.
    assert 600 <= seconds_from_now(answer["earliest_finish"]) <= 626
    assert answer["throughput"] == LINEAR and answer["work"] == 250_000
    assert answer["warnings"] == []


def test_a_vc_that_refuses_infeasible_deadlines_names_the_earliest_finish(world):
    world.vision.infeasible_deadlines = InfeasibleDeadlines.REFUSE
    world.vision.save()

    response = deadline_job(world.client(world.member), 300, 250_000)

    assert response.status_code == 400, response.content
    (message,) = response.json()["deadline"]
    assert message.startswith("Cannot be met: the earliest finish is ")
    finish = message.removeprefix("Cannot be met: the earliest finish is ").rstrip(".")
    assert 600 <= seconds_from_now(finish.replace("Z", "+00:00")) <= 626
    assert not Job.objects.exists()


def test_an_infeasible_deadline_is_accepted_and_flagged_by_default(world):
    client = world.client(world.member)
    response = deadline_job(client, 300, 250_000)

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["admission"], answer["admission_share"]) == ("flagged", None)
    detail = client.get(f"{JOBS}{answer['id']}/").json()
    assert detail["warnings"] == [
        f"Its deadline cannot be met (its earliest finish was {answer['earliest_finish']} "
        "at submit): accepted flagged."
    ]


def test_a_best_effort_job_keeps_its_deadline_but_the_scheduler_does_not_favour_it(world):
    world.vision.infeasible_deadlines = InfeasibleDeadlines.BEST_EFFORT
    world.vision.save()
    client = world.client(world.member)
    best_effort = deadline_job(client, 300, 250_000).json()
    meets = deadline_job(client, 3600, 1000).json()

    assert (best_effort["admission"], meets["admission"]) == ("best_effort", "meets")
    due = {job.id: job.due for job in load_snapshot().queued}
    assert due[best_effort["id"]] is None
    assert due[meets["id"]] is not None


def test_a_busy_cluster_pushes_the_earliest_finish_out(world):
    # Every GPU is held by jobs that end at their wall time, in two hours: the job starts
    # then, on four workers, and takes 625 s.
    for index, node in enumerate(world.nodes[:4]):
        make_job(
            world, status=JobStatus.RUNNING, workers=1, gpus_per_worker=8,
            placement=[{"rank": 0, "node": node.name, "gpus": list(range(8)), "cpus": 8,
                        "memory": 1024}],
            started_at=timezone.now(), name=f"busy-{index}", max_wall_time=7200,
        )  # fmt: skip
    response = deadline_job(world.client(world.member), 3600, 250_000)

    answer = response.json()
    assert answer["admission"] == "flagged", answer
    assert 7200 + 600 <= seconds_from_now(answer["earliest_finish"]) <= 7200 + 626


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"throughput": [200.0, 100.0]}, "throughput", "must not decrease"),
        ({"throughput": [0.0]}, "throughput", "positive"),
        ({"throughput": [1.0] * 5}, "throughput", "max_workers"),
        ({"throughput": []}, "throughput", "at least one value"),
        ({"work": -5}, "work", "0"),
        ({"work": 0}, "work", "positive"),
        ({"work": None}, "work", "null"),
    ],
    ids=["decreasing", "zero", "too long", "empty", "negative work", "no work", "null work"],
)
def test_a_bad_curve_or_work_is_a_400_naming_the_field(world, fields, field, message):
    response = deadline_job(world.client(world.member), 3600, 1000, **fields)

    assert response.status_code == 400, response.content
    assert message in " ".join(response.json()[field])
    assert not Job.objects.exists()


def test_a_curve_needs_the_work(world):
    body = {"throughput": LINEAR, "min_workers": 1, "max_workers": 4, "gpus_per_worker": 1}
    response = submit(world.client(world.member), **body)

    assert response.status_code == 400
    assert response.json() == {"work": ["Give the work the job needs with its throughput."]}


def test_the_curve_is_learned_from_earlier_runs_metrics_lines(world, settings, tmp_path):
    settings.TRAINYARD_LOG_DIR = str(tmp_path)
    reports = {"two": (2, "trainyard: samples_per_second=180 workers=2\n"),
               "four": (4, "step 9\ntrainyard: samples_per_second=300\nstep 10\n")}  # fmt: skip
    for name, (workers, line) in reports.items():
        earlier = make_job(
            world, status=JobStatus.FINISHED, workers=workers, name="resnet",
            started_at=timezone.now() - timedelta(hours=1),
        )  # fmt: skip
        (tmp_path / earlier.job_id).mkdir()
        (tmp_path / earlier.job_id / "worker-0.log").write_text(f"{name}\n{line}")

    response = deadline_job(
        world.client(world.member), 3600, 250_000, throughput=OMIT, name="resnet"
    )

    answer = response.json()
    assert answer["throughput"] == [90.0, 180.0, 180.0, 300.0], answer
    assert answer["admission"] == "meets"


def test_a_vc_admin_chooses_what_happens_to_infeasible_deadlines(world):
    url = f"/api/v1/vcs/{world.vision.name}/"
    admin = world.client(world.vc_admin)

    assert admin.patch(url, {"infeasible_deadlines": "refuse"}, format="json").status_code == 200
    world.vision.refresh_from_db()
    assert world.vision.infeasible_deadlines == "refuse"
    wrong = admin.patch(url, {"infeasible_deadlines": "maybe"}, format="json")
    assert wrong.status_code == 400 and "infeasible_deadlines" in wrong.json()
    member = world.client(world.member).patch(url, {"infeasible_deadlines": "flag"}, format="json")
    assert member.status_code == 403


def test_a_deadline_job_whose_first_forecast_fails_is_still_answered_as_stored(world, monkeypatch):
    """The job is committed before its forecast; a database failure in the forecast must
    not answer 503 for a job that exists (the user would submit it twice)."""

    def server_gone(*args: object, **kwargs: object) -> None:
        raise OperationalError(2013, "Lost connection to server during query")

    monkeypatch.setattr(forecast, "load_snapshot", server_gone)

    response = deadline_job(world.client(world.member), 3600, 250_000)

    assert response.status_code == 201, response.json()
    stored = Job.objects.get()
    assert (response.json()["id"], stored.status) == (stored.job_id, JobStatus.QUEUED)
    assert stored.deadline_forecast is None  # the job manager's next forecast writes it
