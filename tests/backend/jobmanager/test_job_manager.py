"""The job manager in one process: submit, schedule, deploy, end, retry, stop, reconcile.

A memory backend stands in for the cluster; the test decides when each job ends.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.core.lease import LeaseLost, acquire_lease
from backend.jobmanager import deployment, manager
from backend.jobmanager.scheduling import schedule_pass
from backend.jobs.models import FailureClass, Job, JobStatus
from backend.jobs.snapshot import load_snapshot
from jobmanager.backends.memory import MemoryBackend
from tests.backend.jobs_support import JobManager
from tests.backend.manager_support import submit

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
SYNTAX_ERROR_LOG = """Traceback (most recent call last):
  File "/work/train.py", line 3
    print("epoch" 1)
          ^^^^^^^^^
SyntaxError: invalid syntax. Perhaps you forgot a comma?
"""
NCCL_TIMEOUT_LOG = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=27, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800324 milliseconds "
    "before timing out.\n"
)


@pytest.fixture
def backend(tmp_path, settings) -> MemoryBackend:
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    return MemoryBackend(log_dir=settings.TRAINYARD_LOG_DIR)


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


def refreshed(job: Job) -> Job:
    job.refresh_from_db()
    return job


def statuses(*jobs: Job) -> list[str]:
    return [refreshed(job).status for job in jobs]


def test_a_submitted_job_is_placed_deployed_and_runs(world, jobs, backend):
    job = submit(world, workers=2, gpus_per_worker=4)

    jobs.run()

    job = refreshed(job)
    assert job.status == JobStatus.RUNNING
    assert job.attempt == 1 and job.started_at is not None
    deployed = backend.deployed()[job.job_id]
    assert [len(worker["gpus"]) for worker in deployed["workers"]] == [4, 4]
    # Packed: both workers share one 8-GPU node, keeping the other nodes whole.
    assert len({worker["node"] for worker in job.placement}) == 1
    assert list(job.attempts.values_list("number", flat=True)) == [1]
    assert [e.to_status for e in job.events.all()] == ["queued", "scheduling", "running"]


def test_a_job_that_exits_0_finishes_and_frees_its_gpus_for_the_next(world, jobs, backend):
    first = submit(world, workers=2, gpus_per_worker=8)
    second = submit(world, workers=2, gpus_per_worker=8)
    third = submit(world, workers=1, gpus_per_worker=8)
    jobs.run()
    assert statuses(first, second, third) == ["running", "running", "queued"]
    assert "largest free block is 0" in refreshed(third).insight_message

    backend.finish(first.job_id, exit_code=0)
    jobs.run()

    assert statuses(first, second, third) == ["finished", "running", "running"]
    assert refreshed(first).exit_code == 0
    assert first.job_id not in backend.deployed()


def test_a_syntax_error_fails_the_job_without_a_retry(world, jobs, backend):
    job = submit(world, max_retries=3)
    jobs.run()

    backend.finish(job.job_id, exit_code=1, log=SYNTAX_ERROR_LOG)
    jobs.run()

    job = refreshed(job)
    assert job.status == JobStatus.FAILED
    assert job.failure_class == FailureClass.USER
    assert job.failure_rule  # the rule that matched is shown
    assert job.retries_used == 0
    attempt = job.attempts.get()
    assert (attempt.exit_code, attempt.failure_class) == (1, FailureClass.USER)


def test_an_infrastructure_failure_is_retried_after_a_backoff_until_retries_run_out(
    world, jobs, backend
):
    job = submit(world, max_retries=1)
    jobs.run()

    backend.finish(job.job_id, exit_code=1, log=NCCL_TIMEOUT_LOG)
    jobs.run()
    job = refreshed(job)
    assert job.status == JobStatus.QUEUED
    assert (job.failure_class, job.retries_used) == (FailureClass.INFRASTRUCTURE, 1)
    assert job.not_before > timezone.now()  # waiting out its backoff
    jobs.run()
    assert refreshed(job).status == JobStatus.QUEUED

    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    jobs.run()
    assert refreshed(job).status == JobStatus.RUNNING
    assert refreshed(job).attempt == 2

    backend.finish(job.job_id, exit_code=1, log=NCCL_TIMEOUT_LOG)
    jobs.run()
    job = refreshed(job)
    assert job.status == JobStatus.FAILED
    assert list(job.attempts.values_list("failure_class", flat=True)) == [
        FailureClass.INFRASTRUCTURE,
        FailureClass.INFRASTRUCTURE,
    ]


def test_killing_a_running_job_stops_it_in_the_backend(world, jobs, backend):
    job = submit(world)
    jobs.run()

    response = world.client(world.member).post(f"{JOBS}{job.job_id}/kill/", {}, format="json")
    assert response.status_code == 200
    assert refreshed(job).status == JobStatus.KILLING
    jobs.run()

    job = refreshed(job)
    assert job.status == JobStatus.KILLED and job.finished_at is not None
    assert job.job_id not in backend.deployed()


def test_a_paused_job_gives_its_gpus_back_and_resumes_at_its_place(world, jobs, backend):
    paused = submit(world, gpus_per_worker=8, workers=2)
    jobs.run()
    world.client(world.member).post(f"{JOBS}{paused.job_id}/pause/", {}, format="json")
    jobs.run()
    assert refreshed(paused).status == JobStatus.PAUSED
    assert paused.job_id not in backend.deployed()

    world.client(world.member).post(f"{JOBS}{paused.job_id}/resume/", {}, format="json")
    jobs.run()

    assert refreshed(paused).status == JobStatus.RUNNING
    assert refreshed(paused).attempt == 2


def test_a_job_past_its_wall_time_is_stopped_and_ends_as_timeout(world, jobs, backend):
    job = submit(world, max_wall_time=600)
    jobs.run()
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=601))

    jobs.run()

    job = refreshed(job)
    assert job.status == JobStatus.TIMEOUT
    assert "wall-time limit of 600 s" in job.status_message
    assert job.job_id not in backend.deployed()


def test_a_launch_carries_what_is_left_of_the_wall_time_for_the_backend_to_enforce(world, jobs):
    job = submit(world, max_wall_time=600)
    assert deployment.launch_for(job).wall_time == 600  # not started yet: all of it
    jobs.run()
    # requeued after running 200 s: its next attempt may run what is left
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=200))

    left = deployment.launch_for(refreshed(job)).wall_time

    assert left is not None and 395 <= left <= 400


def test_the_vc_cap_on_wall_time_applies_to_jobs_submitted_before_it_was_lowered(
    world, jobs, backend
):
    job = submit(world, max_wall_time=3600)
    jobs.run()
    world.vision.max_wall_time = 60
    world.vision.save()
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=61))

    jobs.run()

    assert refreshed(job).status == JobStatus.TIMEOUT


def test_a_borrower_is_preempted_for_a_guaranteed_job_and_requeued_at_the_head(
    world, jobs, backend
):
    # nlp (quota 8) borrows 16 more GPUs beyond its quota; vision (quota 16) then asks.
    nlp_jobs = [submit(world, user=world.outsider, vc="nlp", gpus_per_worker=8) for _ in range(3)]
    jobs.run()
    assert statuses(*nlp_jobs) == ["running"] * 3
    borrowers = [job for job in nlp_jobs if refreshed(job).borrowing]
    assert len(borrowers) == 2
    later = submit(world, user=world.outsider, vc="nlp", gpus_per_worker=8)  # behind them
    queued_at = {job.pk: job.queued_at for job in borrowers}

    guaranteed = submit(world, gpus_per_worker=8, workers=2)
    summary = jobs.run()

    assert refreshed(guaranteed).status == JobStatus.RUNNING
    assert len(summary.preempted) == 1
    victim = next(job for job in borrowers if job.job_id in summary.preempted)
    victim = refreshed(victim)
    assert victim.status == JobStatus.QUEUED
    assert victim.queued_at == queued_at[victim.pk]  # its place at the head is kept
    assert victim.retries_used == 0  # a preemption spends no retry
    assert victim.attempts.get().failure_class == FailureClass.PREEMPTION
    assert refreshed(later).status == JobStatus.QUEUED
    queue = load_snapshot().queued
    nlp_queue = sorted(
        (job for job in queue if job.vc == "nlp"), key=lambda job: (-job.priority, job.queued_at)
    )
    assert nlp_queue[0].id == victim.job_id


def test_a_job_the_backend_lost_is_requeued_without_spending_a_retry(world, jobs, backend):
    job = submit(world)
    jobs.run()

    backend.lose(job.job_id)
    jobs.run()

    job = refreshed(job)
    assert job.status == JobStatus.RUNNING  # requeued, then placed again at once
    assert job.attempt == 2 and job.retries_used == 0
    first = job.attempts.get(number=1)
    assert first.failure_class == FailureClass.INFRASTRUCTURE and first.ended_at is not None


def test_work_the_database_does_not_know_is_removed_from_the_backend(world, jobs, backend):
    job = submit(world)
    jobs.run()
    Job.objects.filter(pk=job.pk).delete()

    summary = jobs.run()

    assert summary.orphans == [job.job_id]
    assert job.job_id not in backend.deployed()


def test_a_failed_deployment_is_undone_and_the_job_requeued(world, jobs, backend):
    job = submit(world)
    backend.fail_next_deploys(1)

    jobs.run()
    job = refreshed(job)
    assert job.status == JobStatus.QUEUED
    assert "deployment 1 of at most 3 failed and was undone" in job.status_message
    assert backend.deployed() == {}
    assert job.not_before > timezone.now()  # after a backoff, not at once

    Job.objects.filter(pk=job.pk).update(not_before=timezone.now())
    jobs.run()
    job = refreshed(job)
    assert job.status == JobStatus.RUNNING
    assert job.deploy_failures == 0 and job.retries_used == 0
    assert job.run_as == "nobody: the memory backend runs no process" and job.limits == "none"


def test_a_job_that_never_deploys_fails_after_three_tries_with_growing_backoff(
    world, jobs, backend, settings
):
    settings.TRAINYARD_DEPLOY_BACKOFF_SECONDS = 10
    job = submit(world)
    backend.fail_next_deploys(10)
    backoffs = []

    for _ in range(3):
        before = timezone.now()
        jobs.run()
        after = timezone.now()
        job = refreshed(job)
        if job.status == JobStatus.QUEUED:
            # The failure was recorded between before and after, a pass's time apart (more
            # than a second on loaded cores): the backoff is what lies in that window.
            shortest, longest = job.not_before - after, job.not_before - before
            backoffs.append(next(
                seconds for seconds in (10, 20, 40)
                if shortest.total_seconds() - 0.01 <= seconds <= longest.total_seconds() + 0.01
            ))  # fmt: skip
            Job.objects.filter(pk=job.pk).update(not_before=timezone.now())

    assert backoffs == [10, 20]
    assert job.status == JobStatus.FAILED and job.finished_at is not None
    assert job.status_message.startswith("failed: 3 deployments in a row failed; the last: ")
    assert (job.failure_class, job.failure_rule) == (FailureClass.INFRASTRUCTURE, "deploy-failed")
    assert [(a.number, a.failure_rule) for a in job.attempts.all()] == [
        (1, "deploy-failed"), (2, "deploy-failed"), (3, "deploy-failed"),
    ]  # fmt: skip
    assert len(backend.deploy_calls()) == 3
    jobs.run()  # nothing more: no loop of requeues
    assert len(backend.deploy_calls()) == 3 and job.events.count() == 7


def test_a_job_that_ended_before_its_deploy_task_recorded_it_still_ran(world, jobs, backend):
    # The process exited before the deploy task marked the job running: the reconcile
    # that sees it ended records that it ran, then how it ended.
    job = submit(world)
    lease = acquire_lease(manager.LEASE_NAME, 10_000)
    schedule_pass(lease)
    lease.release()
    backend.deploy(deployment.launch_for(refreshed(job)))
    backend.finish(job.job_id, exit_code=0)

    jobs.run()

    job = refreshed(job)
    assert job.status == JobStatus.FINISHED and job.started_at is not None
    assert [event.to_status for event in job.events.all()] == [
        JobStatus.QUEUED, JobStatus.SCHEDULING, JobStatus.RUNNING, JobStatus.FINISHED,
    ]  # fmt: skip
    attempt = job.attempts.get(number=1)
    assert attempt.started_at <= attempt.ended_at
    assert job.started_at <= job.finished_at


def test_deploying_the_same_attempt_twice_starts_it_once(world, jobs, backend):
    job = submit(world)
    lease = acquire_lease(manager.LEASE_NAME, 10_000)
    _, applied = schedule_pass(lease)
    lease.release()
    (job_pk, attempt), *_ = applied.deployments

    outcomes = [deployment.deploy(backend, job_pk, attempt) for _ in range(2)]

    assert outcomes == ["running", "skipped"]
    assert backend.deploy_calls() == [(job.job_id, 1)]


def test_a_job_manager_whose_lease_was_taken_over_cannot_apply_anything(world, jobs, backend):
    job = submit(world)
    stale = acquire_lease(manager.LEASE_NAME, 10_000)
    stale.release()  # say it stalled until its lease expired
    newer = acquire_lease(manager.LEASE_NAME, 10_000)
    schedule_pass(newer)
    newer.release()
    submit(world)

    with pytest.raises(LeaseLost):
        schedule_pass(stale)
    assert refreshed(job).attempt == 1  # placed once, by the newer one
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 1


def test_a_second_job_manager_does_not_wait_for_the_lease(world, jobs):
    held = acquire_lease(manager.LEASE_NAME, 10_000)
    submit(world)
    try:
        summary = jobs.run()
    finally:
        held.release()

    assert summary.lease_taken_by_another and summary.rounds == 0


def test_waiting_jobs_get_an_estimated_start_from_running_jobs_wall_times(world, jobs):
    running = [submit(world, gpus_per_worker=8, max_wall_time=3600) for _ in range(4)]
    jobs.run()
    waiting = submit(world, gpus_per_worker=8, max_wall_time=3600)
    jobs.run()

    manager.refresh_start_estimates()

    estimate = refreshed(waiting).estimated_start_at
    first_end = min(refreshed(job).started_at for job in running) + timedelta(seconds=3600)
    assert abs((estimate - first_end).total_seconds()) <= 1


def test_old_finished_jobs_are_purged_in_batches_and_others_kept(world):
    from tests.factories import JobFactory

    long_ago = timezone.now() - timedelta(days=91)
    old = [
        JobFactory(
            vc=world.vision, owner=world.member, status=JobStatus.FINISHED, finished_at=long_ago
        )
        for _ in range(5)
    ]
    recent = JobFactory(
        vc=world.vision, owner=world.member, status=JobStatus.FAILED, finished_at=timezone.now()
    )
    running = JobFactory(vc=world.vision, owner=world.member, status=JobStatus.RUNNING)

    purged = manager.purge_finished_jobs(older_than_days=90, batch_size=2)

    assert purged == 5
    assert not Job.objects.filter(pk__in=[job.pk for job in old]).exists()
    assert set(Job.objects.values_list("pk", flat=True)) >= {recent.pk, running.pk}


def test_a_submission_wakes_the_job_manager(
    world, backend, redis_namespace, settings, django_capture_on_commit_callbacks
):
    from backend.celery import app

    settings.TRAINYARD_TRIGGER_JOB_MANAGER = True
    settings.TRAINYARD_BACKEND = "memory"
    settings.TRAINYARD_MEMORY_BACKEND_STATE = backend_state = (
        settings.TRAINYARD_LOG_DIR.parent / "mem.json"
    )
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            job = submit(world)
    finally:
        app.conf.task_always_eager = False

    assert refreshed(job).status == JobStatus.RUNNING
    assert job.job_id in MemoryBackend(state_path=backend_state).deployed()


def test_a_bad_retry_rules_file_is_reported_when_a_process_starts(tmp_path, monkeypatch):
    from backend.jobmanager.apps import check_retry_rules

    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - name: broken\n    class: sometimes\n    patterns: ['x']\n")
    monkeypatch.setenv("TRAINYARD_RETRY_RULES", str(rules))

    errors = check_retry_rules()

    assert [error.id for error in errors] == ["trainyard.E001"]
    assert "broken" in errors[0].msg


def test_cordoning_a_node_wakes_the_job_manager(
    world, backend, redis_namespace, settings, django_capture_on_commit_callbacks, monkeypatch
):
    from backend.jobmanager import tasks

    settings.TRAINYARD_TRIGGER_JOB_MANAGER = True
    sent = []
    monkeypatch.setattr(tasks.run_job_manager, "apply_async", lambda *a, **k: sent.append(1))

    with django_capture_on_commit_callbacks(execute=True):
        response = world.client(world.staff).post("/api/v1/nodes/a100-1/cordon/")

    assert response.status_code == 200, response.content
    assert sent == [1]


def test_a_job_with_a_node_selector_runs_only_on_nodes_with_those_labels(world, jobs):
    labelled = world.nodes[2]
    labelled.labels = {"zone": "b", "nvlink": "yes"}
    labelled.save()

    job = submit(world, gpus_per_worker=2, node_selector={"zone": "b"})
    jobs.run()

    assert refreshed(job).status == JobStatus.RUNNING
    assert {worker["node"] for worker in refreshed(job).placement} == {labelled.name}


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ({"zone": "z"}, "No A100 node has the labels zone=z."),
        ({"bad key!": "x"}, "Not a label name: 'bad key!'"),
        ({f"k{index}": "v" for index in range(11)}, "At most 10 labels."),
    ],
)
def test_a_node_selector_no_node_can_satisfy_is_refused_on_its_field(world, selector, message):
    response = world.client(world.member).post(
        JOBS,
        {"vc": "vision", "gpu_type": "A100", "command": "true", "node_selector": selector},
        format="json",
    )

    assert response.status_code == 400
    assert message in response.json()["node_selector"][0]


def test_a_job_on_a_node_that_went_bad_is_requeued_at_once_without_spending_a_retry(
    world, jobs, backend, monkeypatch
):
    from jobmanager.backends import JobReport, WorkerReport, WorkerState
    from jobmanager.backends.base import NODE_UNHEALTHY

    job = submit(world, max_retries=0)
    jobs.run()
    bad = JobReport(
        job.job_id,
        1,
        (WorkerReport(0, WorkerState.FAILED, None, f"{NODE_UNHEALTHY}: node a100-1 NotReady"),),
    )
    real_reports = backend.reports
    monkeypatch.setattr(backend, "reports", lambda: real_reports() | {job.job_id: bad})

    jobs.run()

    job = refreshed(job)
    assert job.status in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert job.retries_used == 0 and job.failure_rule == "node-unhealthy"
    assert "node a100-1 NotReady" in job.repair_message


def backend_node(name: str, ready: bool = True, gpu_type: str = "A100"):
    from jobmanager.backends import BackendNode

    return BackendNode(name, gpu_type, 8, 64_000, 512 * 1024, ready=ready)


def test_nodes_the_backend_reports_not_ready_get_no_new_work(world, redis_namespace, tmp_path):
    nodes = [backend_node(f"a100-{index}", ready=index != 1) for index in range(1, 5)]
    nodes += [backend_node(f"cpu-{index}", gpu_type="cpu") for index in range(1, 3)]
    jobs = JobManager(MemoryBackend(nodes=nodes, log_dir=tmp_path))
    job = submit(world, gpus_per_worker=8)

    jobs.run()

    world.nodes[0].refresh_from_db()
    assert not world.nodes[0].ready
    assert "not ready" in world.nodes[0].ready_reason
    assert {worker["node"] for worker in refreshed(job).placement} != {"a100-1"}
    assert refreshed(job).status == JobStatus.RUNNING


def test_nodes_the_backend_has_are_registered(world, redis_namespace, tmp_path):
    from backend.clusters.models import Node

    nodes = [backend_node(node.name, gpu_type=node.gpu_type.name) for node in world.nodes]
    nodes.append(backend_node("h100-1", gpu_type="H100"))
    JobManager(MemoryBackend(nodes=nodes, log_dir=tmp_path)).run()

    added = Node.objects.get(name="h100-1")
    assert (added.gpu_type.name, added.gpus, added.ready) == ("H100", 8, True)
    assert added.gpu_type.cpus_per_gpu == 8


def test_a_job_waiting_for_its_victims_keeps_its_place_and_starts_there(
    world, redis_namespace, tmp_path
):
    backend = MemoryBackend(log_dir=tmp_path, stop_at_once=False)
    jobs = JobManager(backend)
    borrowers = [submit(world, user=world.outsider, vc="nlp", gpus_per_worker=8) for _ in range(4)]
    jobs.run()
    assert statuses(*borrowers) == ["running"] * 4

    guaranteed = submit(world, gpus_per_worker=8)
    summary = jobs.run()
    (victim,) = summary.preempted
    kept = refreshed(guaranteed).reserved_placement
    assert refreshed(guaranteed).status == JobStatus.QUEUED and kept
    assert "released their GPUs" in refreshed(guaranteed).insight_message

    jobs.run()  # the victim is still stopping: nothing more is preempted
    assert Job.objects.filter(status=JobStatus.PAUSING).count() == 1
    backend.finish_stopping(victim)
    jobs.run()

    guaranteed = refreshed(guaranteed)
    assert guaranteed.status == JobStatus.RUNNING
    assert [w["node"] for w in guaranteed.placement] == [w["node"] for w in kept]
    assert guaranteed.reserved_placement is None
