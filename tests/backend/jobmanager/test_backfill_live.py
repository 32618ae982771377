"""Backfill on the running system: a VC admin picks the policy over REST, jobs are real
processes on the local backend (run as their owner's account), the job manager runs in
this process. A small job runs beside the reservation of a waiting gang, a long one does
not, and the gang starts as soon as the job it waits for ends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from backend.jobs.models import Job, JobStatus
from backend.vcs.models import Quota
from tests.backend.local_support import JobManager, backend, history, jobs, submit  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

# How long the job manager may take to notice an end and start what waited for it.
SLACK_SECONDS = 4.0


@pytest.mark.parametrize("policy", ["BF", "LAS", "FS"])
def test_a_small_job_runs_beside_a_reservation_and_the_reserved_gang_starts_on_time(
    world,
    jobs,  # noqa: F811 (the fixture)
    policy,
):
    Quota.objects.filter(vc=world.vision, gpu_type=world.a100).update(
        gpus=32, cpus=256, memory=2048 * 1024
    )
    answer = world.client(world.vc_admin).patch(
        f"/api/v1/vcs/{world.vision.name}/", {"policy": policy}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    history(world, gpus=6, workers=4, seconds=8)  # the first job's kind: 8 s
    history(world, gpus=1, workers=1, seconds=1)  # the small job's kind: 1 s
    history(world, gpus=2, workers=1, seconds=3000)  # the long job's kind: 50 minutes

    # 24 of the 32 GPUs, 6 on each node, for 8 s (as its kind ran).
    first = submit(world, command="sleep 8", workers=4, gpus_per_worker=6)
    first = jobs.run_until(first, JobStatus.RUNNING)
    # Needs every node whole: reserved for when the first job is expected to end.
    gang = submit(world, command="sleep 1", workers=4, gpus_per_worker=8)
    # Expected to run 50 minutes (as its kind did): it would delay the gang.
    long = submit(world, command="sleep 1", gpus_per_worker=2)
    # Expected to run 1 s: done long before the gang can start, so it goes now.
    small = submit(world, command="sleep 1", gpus_per_worker=1)

    small = jobs.run_until(small, JobStatus.RUNNING, JobStatus.FINISHED)
    first.refresh_from_db()
    assert first.status == JobStatus.RUNNING, "the small job ran beside the reservation"
    gang.refresh_from_db()
    long.refresh_from_db()
    assert (gang.status, long.status) == (JobStatus.QUEUED, JobStatus.QUEUED)
    assert "reserved" in gang.insight_message

    gang = jobs.run_until(gang, JobStatus.RUNNING, JobStatus.FINISHED)
    first.refresh_from_db()
    long.refresh_from_db()
    assert first.status == JobStatus.FINISHED
    assert gang.started_at <= first.finished_at + timedelta(seconds=SLACK_SECONDS)
    assert long.started_at is None or long.started_at >= gang.started_at
    jobs.run_until(long, JobStatus.FINISHED)
    assert Job.objects.get(pk=gang.pk).status == JobStatus.FINISHED
