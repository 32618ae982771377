"""A Celery worker killed (SIGKILL) at each named step of a deployment, on the local
backend with real processes run as their owners: no job is left `running` without
processes, every job finishes exactly once or is requeued, and kill ends every one; the
same with the workers' inits forked by the resident spawner (test_crash_safe_spawner.py,
a file of its own so that pytest-xdist runs the two halves side by side).

The worker runs the solo pool, so that the process that dies is the worker itself; the
job manager runs in this process (as tests/backend/jobs/test_local_backend_e2e.py runs it),
handing deployments to the worker through the broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from backend.jobmanager import tasks
from backend.jobs import actions
from backend.jobs.models import Job, JobStatus
from jobmanager.backends.local import LocalBackend
from tests import servers
from tests.backend.jobs_support import JobManager
from tests.backend.local_support import NODES, log_of, submit
from tests.jobmanager.test_local_backend import job_processes
from tests.polling import wait_until
from tests.servers import kill_process_group, start_celery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CRASH_POINTS = [
    "deploy-before-backend",  # lifecycle.deploy: checks done, nothing started
    "local-worker-recorded",  # the worker recorded, its init not started
    "local-init-started",  # the init started (held), its pid not recorded
    "local-pid-recorded",  # its pid recorded, not yet told to go
    "local-deploy-before-complete",  # the command running, the deployment not complete
    "deploy-before-running",  # the backend's deployment complete, the job not `running`
]
GRACE_SECONDS = 2
# How long a freshly started solo Celery worker may take to reach a crash point, or to take
# over after one: its start (Django, Celery, a Redis connection) is most of it, and takes
# well over 20 s when the suite's other processes (pytest-xdist) load the machine.
WORKER_START_SECONDS = 60


class CrashingWorkers:
    """A solo Celery worker that kills itself at ``point`` (once per ``arm``)."""

    def __init__(self, host_tmp, redis_url: str, settings) -> None:
        self.env = servers.live_env(host_tmp, redis_url, "crash") | {
            "TRAINYARD_REDIS_PREFIX": settings.TRAINYARD_REDIS_PREFIX,
            "TRAINYARD_TRIGGER_JOB_MANAGER": "false",
            "TRAINYARD_BACKEND": "local",
            "TRAINYARD_LOCAL_STATE_DIR": str(host_tmp / "local-backend"),
            "TRAINYARD_LOG_DIR": str(host_tmp / "logs"),
            "TRAINYARD_LOCAL_NODES": NODES,
            "TRAINYARD_LOCAL_CGROUP_ROOT": "",
            "TRAINYARD_LOCAL_KILL_AFTER_SECONDS": "1",
        }
        self.host_tmp = host_tmp
        self.redis_url = redis_url
        self.process = None
        self.rounds = 0

    def arm(self, point: str) -> None:
        """Start a worker that dies at ``point`` the first time it gets there."""
        self.close()  # the worker that took over from the last one to die
        self.rounds += 1
        once = self.host_tmp / f"crashed-{self.rounds}"
        once.mkdir()
        self.start({"TRAINYARD_CRASH_AT": point, "TRAINYARD_CRASH_ONCE_DIR": str(once)})

    def start(self, extra: dict[str, str] | None = None) -> None:
        self.process = start_celery(
            self.env | (extra or {}), "worker", "--pool", "solo", "--without-gossip",
            "--without-mingle", "--without-heartbeat",
        )  # fmt: skip

    def crashed(self) -> bool:
        return self.process.poll() is not None

    def enqueue(self, job_pk: int, attempt: int) -> None:
        """Through the test's Redis, which is the worker's broker (this process's Celery
        app was configured at import, for an embedded Redis when REDIS_URL is unset)."""
        queue = self.env["TRAINYARD_CELERY_QUEUE"]
        with tasks.deploy_job.app.connection_for_write(self.redis_url) as connection:
            tasks.deploy_job.apply_async((job_pk, attempt), queue=queue, connection=connection)

    def enqueue_round(self, deployments: list[tuple[int, int]]) -> None:
        """A round's deployments, one task each, as the worker is to crash in one."""
        for job_pk, attempt in deployments:
            self.enqueue(job_pk, attempt)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            kill_process_group(self.process)


@pytest.fixture
def workers(host_tmp, redis_url, redis_namespace, settings) -> Iterator[CrashingWorkers]:
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = GRACE_SECONDS
    settings.TRAINYARD_DEPLOY_TIMEOUT_SECONDS = 1  # a lost deployment is handed out again
    crashing = CrashingWorkers(host_tmp, redis_url, settings)
    yield crashing
    crashing.close()


@pytest.fixture
def backend(host_tmp) -> Iterator[LocalBackend]:
    backend = LocalBackend(
        host_tmp / "local-backend", host_tmp / "logs", nodes=NODES, cgroup_root=None,
        kill_after_seconds=1,
    )  # fmt: skip
    yield backend
    for job_id in backend.reports():
        backend.remove(job_id)


def has_processes(job: Job, backend: LocalBackend) -> bool:
    inits = [pid for pid in backend.init_pids(job.job_id).values() if pid is not None]
    return bool(inits or job_processes(job.job_id))


def never_running_without_processes(job: Job, backend: LocalBackend, jobs: JobManager) -> None:
    """A job seen `running` with nothing of it left is no longer `running` after the next
    pass (it may have ended just now: the pass records how)."""
    job.refresh_from_db()
    if job.status == JobStatus.RUNNING and not has_processes(job, backend):
        jobs.run()
        job.refresh_from_db()
        assert job.status != JobStatus.RUNNING or has_processes(job, backend), (
            f"{job.job_id} is running with no process: {backend.reports().get(job.job_id)}"
        )


def crash_a_deployment(world, workers: CrashingWorkers, jobs: JobManager, point: str, command):
    """Submit a job and hand it to a worker armed to die at ``point``; once it has died,
    a worker that does not die takes over. Returns the job."""
    workers.arm(point)
    job = submit(world, command=command)
    wait_until(
        lambda: jobs.run() and workers.crashed(),
        WORKER_START_SECONDS,
        f"the worker to die at {point}",
    )
    assert workers.process.returncode == -9
    workers.start()
    return job


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_worker_killed_at_each_step_of_a_deployment_leaves_no_job_stuck(
    world, workers, backend, point
):
    crash_each_time_at(world, workers, backend, point)


def crash_each_time_at(world, workers: CrashingWorkers, backend: LocalBackend, point: str):
    """Twice over: a job whose deployment crashed at ``point`` finishes exactly once, and
    one killed after such a crash ends, leaving no process."""
    jobs = JobManager(backend, workers.enqueue_round)
    for _ in range(2):  # repeated: the same step, twice over
        job = crash_a_deployment(world, workers, jobs, point, "echo ran; sleep 1")

        def finished(job=job) -> bool:
            jobs.run()
            never_running_without_processes(job, backend, jobs)
            return job.status in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.KILLED)

        wait_until(
            finished, WORKER_START_SECONDS, f"job {job.job_id} to end after a crash at {point}"
        )
        assert job.status == JobStatus.FINISHED, job.status_message
        assert job.events.filter(to_status=JobStatus.FINISHED).count() == 1
        assert job.events.filter(to_status=JobStatus.RUNNING).count() == job.attempt
        runs = log_of(job).count("ran\n")
        # Only a crash after the command started (and before the deployment was complete,
        # which is then undone and redone) may have run it twice.
        assert runs == 1 or (point == "local-deploy-before-complete" and runs == 2), runs
        assert job_processes(job.job_id) == []

        doomed = crash_a_deployment(world, workers, jobs, point, "sleep 300")
        actions.kill_job(doomed, None)
        asked = time.monotonic()

        def killed(job=doomed) -> bool:
            jobs.run()
            never_running_without_processes(job, backend, jobs)
            return job.status == JobStatus.KILLED and not job_processes(job.job_id)

        wait_until(killed, 20, f"job {doomed.job_id} to be killed after a crash at {point}")
        assert time.monotonic() - asked < GRACE_SECONDS + 5
        assert doomed.job_id not in backend.reports()
