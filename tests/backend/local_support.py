"""The local backend end to end, for the tests that run it: jobs submitted over REST, the job
manager run in this process, every worker a real process on this host run as its owner's
Unix account, every node of ``world``'s cluster declared on this host."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from backend.jobs.models import Job, JobStatus
from jobmanager.backends.local import LocalBackend
from tests.backend import jobs_support
from tests.factories import JobFactory
from tests.polling import wait_until
from tests.sandbox_network import shared_with_jobs
from tests.unix_accounts import JOB_PYTHON, readable_script

JOBS = "/api/v1/jobs/"

# The world fixture's cluster, declared: every node of it runs on this host.
NODES = ",".join([*(f"a100-{index}:A100:8" for index in range(1, 5)), "cpu-1:cpu:0", "cpu-2:cpu:0"])
PYTHON = shlex.quote(JOB_PYTHON)


class JobManager(jobs_support.JobManager):
    def run_until(self, job: Job, *statuses: str, attempt: int | None = None) -> Job:
        """Run the job manager until the job is in one of ``statuses`` (at ``attempt``)."""

        def reached() -> Job | None:
            self.run()
            job.refresh_from_db()
            wanted = job.status in statuses and attempt in (None, job.attempt)
            return job if wanted else None

        return wait_until(reached, 20, f"job {job.job_id} to be {' or '.join(statuses)}")


@pytest.fixture
def backend(host_tmp, settings) -> Iterator[LocalBackend]:
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    backend = local_backend(host_tmp)
    yield backend
    for job_id in backend.reports():
        backend.remove(job_id)


def local_backend(host_tmp: Path, sandbox: str = "auto") -> LocalBackend:
    """The backend of these tests: the default sandbox (runc as root) seeing the test's
    directory, or ``sandbox``."""
    return LocalBackend(
        host_tmp / "local-backend",
        host_tmp / "logs",
        nodes=NODES,
        cgroup_root=None,
        kill_after_seconds=1,
        sandbox=sandbox,
        sandbox_readonly_paths=shared_with_jobs(host_tmp),
    )


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


def submit(world, user=None, **spec) -> Job:
    body = {"vc": "vision", "gpu_type": "A100", "gpus_per_worker": 1} | spec
    response = world.client(user or world.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def script(directory: Path, name: str, text: str) -> str:
    """A command running ``text`` as a Python script written to ``directory``, which the
    job's account can read."""
    return f"{PYTHON} {shlex.quote(str(readable_script(directory, name, text)))}"


def log_of(job: Job, rank: int = 0) -> str:
    path = Path(settings.TRAINYARD_LOG_DIR) / job.job_id / f"worker-{rank}.log"
    return path.read_text() if path.exists() else ""


def history(world, gpus: int, workers: int, seconds: float, count: int = 3) -> None:
    """Finished jobs of the member's: what backfill learns how long such jobs run from."""
    ended = timezone.now() - timedelta(hours=1)
    for _ in range(count):
        JobFactory(
            owner=world.member, vc=world.vision, gpu_type=world.a100, workers=workers,
            gpus_per_worker=gpus, status=JobStatus.FINISHED,
            started_at=ended - timedelta(seconds=seconds), finished_at=ended,
        )  # fmt: skip
