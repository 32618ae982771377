"""Deadlines on the running system: jobs are real processes on the local backend (run as
their owner's account), the job manager runs in this process. The submit answer and the
job page say whether a job is predicted to make its deadline; the scheduler runs a job
that can make its deadline ahead of earlier work; the VC reports the share met."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.jobs.models import Job, JobStatus
from backend.vcs.models import Quota
from tests.backend.local_support import JOBS, JobManager, backend, history, jobs, submit  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def submitted(world, **spec) -> tuple[Job, dict]:
    """Submit as the member; the job and the submit answer."""
    body = {"vc": "vision", "gpu_type": "A100", "max_wall_time": 600} | spec
    response = world.client(world.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    answer = response.json()
    return Job.objects.get(job_id=answer["id"]), answer


def test_a_job_that_can_make_its_deadline_runs_first_and_the_vc_reports_deadlines_met(
    world,
    jobs,  # noqa: F811 (the fixture)
):
    Quota.objects.filter(vc=world.vision, gpu_type=world.a100).update(
        gpus=32, cpus=256, memory=2048 * 1024
    )
    answer = world.client(world.vc_admin).patch(
        f"/api/v1/vcs/{world.vision.name}/", {"policy": "BF"}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    history(world, gpus=8, workers=4, seconds=1)  # whole-cluster jobs of hers: 1 s
    history(world, gpus=2, workers=1, seconds=600)  # her 2-GPU jobs: 10 minutes

    # The whole cluster for 4 s (its wall time: 10 minutes).
    first = submit(world, command="sleep 4", workers=4, gpus_per_worker=8, max_wall_time=600)
    first = jobs.run_until(first, JobStatus.RUNNING)
    # Waits for the whole cluster; no deadline.
    plain, plain_answer = submitted(world, command="sleep 1", workers=4, gpus_per_worker=8)
    # Submitted later, with a deadline it makes even if the first job runs to its wall time.
    due = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    urgent, urgent_answer = submitted(
        world, command="sleep 1", workers=4, gpus_per_worker=8, deadline=due.isoformat()
    )
    # Jobs of its kind run 10 minutes: it cannot finish in 6 s (and takes 12).
    late, late_answer = submitted(
        world,
        command="sleep 12",
        gpus_per_worker=2,
        deadline=(timezone.now() + timedelta(seconds=6)).isoformat(),
    )

    assert plain_answer["deadline"] is None and plain_answer["deadline_forecast"] is None
    assert urgent_answer["deadline_forecast"] is True
    assert urgent_answer["estimated_start_at"] is not None
    assert late_answer["deadline_forecast"] is False
    page = world.client(world.member).get(f"{JOBS}{late.job_id}/").json()
    assert (page["deadline_forecast"], page["status"]) == (False, "queued")

    urgent = jobs.run_until(urgent, JobStatus.FINISHED)
    plain = jobs.run_until(plain, JobStatus.FINISHED)
    late = jobs.run_until(late, JobStatus.FINISHED)
    first.refresh_from_db()
    assert first.finished_at <= urgent.started_at < plain.started_at, (
        "the job that could make its deadline went ahead of the earlier one"
    )
    page = world.client(world.member).get(f"{JOBS}{urgent.job_id}/").json()
    assert page["deadline"] == due.isoformat().replace("+00:00", "Z")
    assert late.finished_at > late.deadline and urgent.finished_at <= urgent.deadline

    report = world.client(world.member).get(f"/api/v1/vcs/{world.vision.name}/deadlines/")
    assert report.status_code == 200, report.json()
    summary = report.json()
    assert (summary["ended"], summary["met"], summary["met_rate"]) == (2, 1, 0.5)
    assert (summary["pending"], summary["predicted_late"]) == (0, 0)


def test_a_deadline_in_the_past_or_not_a_time_is_refused_with_a_field_error(world):
    client = world.client(world.member)
    for deadline in [(timezone.now() - timedelta(minutes=1)).isoformat(), "tomorrow"]:
        body = {"vc": "vision", "gpu_type": "A100", "command": "true", "deadline": deadline}
        response = client.post(JOBS, body, format="json")
        assert response.status_code == 400
        assert "deadline" in response.json()
    assert not Job.objects.exists()
