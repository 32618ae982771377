"""Throughput curves in the live job manager (issue 34): the snapshot a pass loads gives
the core each elastic job's curve and the work it has left, so that a deadline job gets
its minimum satisfactory share before a job without a deadline, and the GPUs left go
where the curves say they shorten jobs most (diminishing returns), as in the simulator.

The memory backend stands in for the cluster (it resizes at once); one 8-GPU node is
schedulable, and every worker takes one GPU, so that sizes are what the curves ask.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from backend.jobs.models import Job
from backend.jobs.snapshot import load_snapshot
from jobmanager.backends.memory import MemoryBackend
from tests.backend import elastic_support
from tests.backend.jobs_support import JOBS, JobManager

pytestmark = pytest.mark.django_db
backend, one_node = elastic_support.backend, elastic_support.one_node  # the fixtures

HOUR = 3600.0
LINEAR = [100.0 * workers for workers in range(1, 9)]  # samples/s at 1..8 workers


def submit(world, **spec) -> Job:
    body = {
        "vc": "vision",
        "gpu_type": "A100",
        "command": "torchrun train.py",
        "gpus_per_worker": 1,
        "workers": 1,
        "min_workers": 1,
        "max_workers": 8,
    } | spec
    response = world.client(world.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def workers_of(backend: MemoryBackend, job: Job) -> int:
    return len(backend.deployed()[job.job_id]["workers"])


def test_a_deadline_job_gets_its_satisfactory_share_before_a_job_without_a_deadline(
    world, one_node, backend, redis_namespace
):
    # It needs 5 workers' 500 samples/s for 90 % of the hour to its deadline (4 are
    # late), and a sixth would add nothing.
    work = 5 * 100.0 * 0.9 * HOUR
    due = timezone.now() + timedelta(hours=1)
    plain = submit(world, name="plain")  # submitted first, no deadline, no curve
    urgent = submit(
        world, name="urgent", deadline=due.isoformat(), throughput=LINEAR[:5], work=work
    )
    assert urgent.admission == "meets" and urgent.admission_share == 5

    JobManager(backend).run()

    # One worker at a time round the two would have made it 4 and 4 (its deadline missed).
    assert (workers_of(backend, urgent), workers_of(backend, plain)) == (5, 3)


def test_idle_gpus_go_where_the_curves_say_they_shorten_jobs_most(
    world, one_node, backend, redis_namespace
):
    work = 100.0 * HOUR
    # A job that scales (each worker adds 100 samples/s), and one that barely does.
    scaling = submit(world, name="scaling", throughput=LINEAR, work=work)
    saturated = submit(world, name="saturated", throughput=[100.0, 101.0], work=work)

    JobManager(backend).run()

    # Every GPU after each job's first shortens the scaling job more than the other.
    assert (workers_of(backend, scaling), workers_of(backend, saturated)) == (7, 1)


def test_a_running_job_s_work_left_shrinks_as_it_runs_and_its_curve_is_loaded(
    world, one_node, backend, redis_namespace
):
    work = 100.0 * HOUR
    job = submit(world, name="scaling", throughput=LINEAR, work=work)
    JobManager(backend).run()
    job.refresh_from_db()
    assert job.workers == 8

    half_an_hour_on = job.started_at + timedelta(minutes=30)
    [running] = load_snapshot(half_an_hour_on, elastic=True).running

    assert running.elastic is not None
    assert running.elastic.throughput == tuple(LINEAR)
    # 30 minutes at 800 samples/s: 1,440,000 of its 360,000 done, so nothing is left.
    assert running.elastic.work == 0.0
    [early] = load_snapshot(job.started_at + timedelta(seconds=90), elastic=True).running
    assert early.elastic is not None and early.elastic.work == pytest.approx(work - 800 * 90)


def test_the_snapshot_reads_curves_in_the_same_queries_however_many_jobs_have_one(
    world, one_node, backend, redis_namespace
):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            load_snapshot(elastic=True)
        return len(captured.captured_queries)

    submit(world, name="a", throughput=LINEAR, work=HOUR)
    few = queries()
    for name in "bcdef":
        submit(world, name=name, throughput=LINEAR, work=HOUR)
    JobManager(backend).run()  # some of them running now, the rest queued
    assert queries() == few
