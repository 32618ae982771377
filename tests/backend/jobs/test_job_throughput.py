"""What keeps bursts fast: a round's starts deployed together, in threads; a job manager
run that keeps to its time budget; a round's decisions applied in a bounded number of
queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from backend.core import job_manager_triggers as triggers
from backend.core.bulk import rows_by_key
from backend.core.redis import redis_client
from backend.jobmanager import deployment, manager
from backend.jobs.models import Job, JobEvent, JobStatus
from jobmanager.backends.memory import MemoryBackend
from tests.backend.jobs_support import submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def backend(tmp_path, settings) -> MemoryBackend:
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    return MemoryBackend(log_dir=settings.TRAINYARD_LOG_DIR)


def submit_many(world, count: int) -> list[str]:
    response = submit(world.client(world.member), gpus_per_worker=1, array={"count": count})
    assert response.status_code == 201, response.json()
    return response.json()["jobs"]


def test_a_rounds_starts_are_deployed_together_and_each_runs(world, backend, redis_namespace):
    job_ids = submit_many(world, 12)
    batches: list[list[tuple[int, int]]] = []

    summary = manager.run_job_manager(backend, batches.append)

    assert len(summary.started) == 12
    assert [len(batch) for batch in batches] == [12]
    outcomes = deployment.deploy_many(backend, batches[0])
    assert outcomes == ["running"] * 12
    assert set(backend.deployed()) == set(job_ids)
    for job in Job.objects.filter(job_id__in=job_ids):
        assert job.status == JobStatus.RUNNING and job.started_at is not None
        path = list(job.events.values_list("to_status", flat=True))
        assert path == [JobStatus.QUEUED, JobStatus.SCHEDULING, JobStatus.RUNNING]
    assert deployment.deploy_many(backend, batches[0]) == ["skipped"] * 12  # idempotent


def test_a_failed_deployment_among_many_is_retried_alone(world, backend, redis_namespace):
    submit_many(world, 3)
    batches: list[list[tuple[int, int]]] = []
    manager.run_job_manager(backend, batches.append)
    backend.fail_next_deploys(1)

    outcomes = deployment.deploy_many(backend, batches[0])

    assert sorted(outcomes) == ["requeued", "running", "running"]
    statuses = sorted(Job.objects.values_list("status", flat=True))
    assert statuses == [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RUNNING]
    assert len(backend.deployed()) == 2


def test_jobs_ending_together_are_finished_together_none_skipping_running(
    world, backend, redis_namespace
):
    job_ids = submit_many(world, 6)
    manager.run_job_manager(backend, lambda batch: deployment.deploy_many(backend, batch))
    for job_id in job_ids[:5]:
        backend.finish(job_id)
    backend.finish(job_ids[5], exit_code=1)

    summary = manager.run_job_manager(backend, lambda batch: None)

    assert sorted(summary.finished) == sorted(job_ids[:5])
    for job in Job.objects.filter(job_id__in=job_ids[:5]):
        assert (job.status, job.exit_code, job.placement) == (JobStatus.FINISHED, 0, [])
        path = list(job.events.values_list("to_status", flat=True))
        assert path == [JobStatus.QUEUED, JobStatus.SCHEDULING, JobStatus.RUNNING,
                        JobStatus.FINISHED]  # fmt: skip
        attempt = job.attempts.get()
        assert (attempt.exit_code, attempt.message) == (0, "finished")
        assert attempt.ended_at is not None
    assert job_ids[5] not in summary.finished  # a failure goes its own way (retry rules)
    assert set(backend.deployed()) == set() or job_ids[5] in summary.retried + summary.failed


def test_jobs_ending_before_their_deploy_task_records_them_run_and_finish_in_bulk(
    world, backend, redis_namespace
):
    def end_unrecorded(count: int) -> tuple[list[str], int]:
        """``count`` jobs deployed and ended, their deploy task not yet done; the queries
        of the job manager run that finds them."""
        job_ids = submit_many(world, count)
        batches: list[list[tuple[int, int]]] = []
        manager.run_job_manager(backend, batches.append)
        for job in Job.objects.filter(pk__in=[pk for pk, _ in batches[0]]):
            backend.deploy(deployment.launch_for(job))  # the backend's part of the task only
            backend.finish(job.job_id)
        with CaptureQueriesContext(connection) as queries:
            summary = manager.run_job_manager(backend, lambda batch: None)
        assert sorted(summary.finished) == sorted(job_ids)
        return job_ids, len(queries)

    job_ids, few = end_unrecorded(2)
    more_ids, many = end_unrecorded(12)

    assert many == few  # recorded together, not one job at a time
    for job in Job.objects.filter(job_id__in=job_ids + more_ids):
        assert (job.status, job.exit_code) == (JobStatus.FINISHED, 0)
        assert job.started_at is not None and job.attempts.get().ended_at is not None
        path = list(job.events.values_list("to_status", flat=True))
        assert path == [JobStatus.QUEUED, JobStatus.SCHEDULING, JobStatus.RUNNING,
                        JobStatus.FINISHED]  # fmt: skip


def test_a_round_applies_its_decisions_in_a_bounded_number_of_queries(
    world, backend, redis_namespace
):
    def queries_of_a_round(jobs: int) -> int:
        submit_many(world, jobs)
        with CaptureQueriesContext(connection) as queries:
            summary = manager.run_job_manager(backend, lambda batch: None)
        assert len(summary.started) == jobs
        Job.objects.filter(status=JobStatus.SCHEDULING).update(status=JobStatus.KILLED)
        return len(queries)

    queries_of_a_round(1)  # the first run records its fencing token's row
    assert queries_of_a_round(30) == queries_of_a_round(2)
    assert JobEvent.objects.filter(to_status=JobStatus.SCHEDULING).count() == 33


def test_waiting_jobs_reasons_are_written_to_exactly_their_rows_in_few_queries(
    world, backend, redis_namespace
):
    job_ids = submit_many(world, 60)
    pks = sorted(Job.objects.filter(job_id__in=job_ids).values_list("pk", flat=True))
    chosen = pks[:20] + pks[25:26] + pks[30:34] + pks[40:]  # two long runs, five others
    conditions = list(rows_by_key(chosen))
    assert len(conditions) == 2  # the runs as ranges in one query, the rest listed in one
    matched = [
        pk
        for condition in conditions
        for pk in Job.objects.filter(condition).values_list("pk", flat=True)
    ]
    assert sorted(matched) == chosen

    summary = manager.run_job_manager(backend, lambda batch: None)
    waiting = Job.objects.filter(status=JobStatus.QUEUED)
    assert summary.waiting == waiting.count() > 0
    assert all(
        message.startswith("Waiting: ")
        for message in waiting.values_list("insight_message", flat=True)
    )
    assert not Job.objects.exclude(status=JobStatus.QUEUED).filter(
        insight_message__startswith="Waiting"
    )


def test_a_run_past_its_budget_leaves_its_request_for_the_next(
    world, backend, redis_namespace, settings
):
    settings.TRAINYARD_JOB_MANAGER_BUDGET_SECONDS = 0
    submit_many(world, 2)

    summary = manager.run_job_manager(backend, lambda batch: None)

    assert summary.over_budget and summary.rounds == 0
    assert redis_client().exists(triggers.job_manager_rerun_key())
    settings.TRAINYARD_JOB_MANAGER_BUDGET_SECONDS = 5
    assert len(manager.run_job_manager(backend, lambda batch: None).started) == 2


@pytest.fixture
def queued_tasks(settings, monkeypatch) -> list[int]:
    """Submissions ask for job manager runs; each task they queue is recorded, not sent."""
    from backend.jobmanager import tasks

    settings.TRAINYARD_TRIGGER_JOB_MANAGER = True
    queued: list[int] = []
    monkeypatch.setattr(tasks.run_job_manager, "apply_async", lambda *a, **k: queued.append(1))
    return queued


def test_submissions_while_a_run_goes_round_queue_no_task_and_that_run_starts_them(
    world, backend, redis_namespace, queued_tasks
):
    first = submit_many(world, 2)
    assert queued_tasks == [1]  # the two requests before a run collapse into one task
    redis_client().delete(triggers.job_manager_requested_key())  # as the task does
    during: list[str] = []

    def deploy(batch: list[tuple[int, int]]) -> None:
        if not during:  # submitted while the run holds its lease
            during.extend(submit_many(world, 3))

    summary = manager.run_job_manager(backend, deploy)

    assert queued_tasks == [1]
    assert sorted(summary.started) == sorted(first + during)
    assert summary.rounds == 2 and not summary.over_budget


def test_a_request_just_after_a_run_let_its_lease_go_queues_a_task(
    world, backend, redis_namespace, queued_tasks
):
    manager.run_job_manager(backend, lambda batch: None)

    triggers.request_job_manager_run()

    assert queued_tasks == [1]
