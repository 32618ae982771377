"""Self-healing under real faults: Redis losing its data, a job manager killed mid-pass.

Each test kills or empties servers and processes of its own (a redis-server on a port of
its own, a job manager in a subprocess), never the shared ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from backend.core.lease import last_applied_token
from backend.jobmanager import manager
from backend.jobs.models import Job, JobStatus
from jobmanager.backends.memory import MemoryBackend
from tests.backend.jobs_support import JobManager
from tests.backend.manager_support import submit
from tests.servers import ROOT, session_database_url

pytestmark = pytest.mark.integration


@pytest.fixture
def jobs(tmp_path, settings) -> JobManager:
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    return JobManager(MemoryBackend(log_dir=settings.TRAINYARD_LOG_DIR))


@pytest.mark.django_db
def test_after_redis_loses_its_data_the_next_queued_job_starts_at_once(world, own_redis, jobs):
    for _ in range(25):  # a system that has run a while: its fencing token is well up
        submit(world)
        jobs.run()
    applied = last_applied_token(manager.LEASE_NAME)
    assert applied >= 25

    own_redis.restart_empty()  # kill -9, back without its data: the counter starts at 0
    waiting = submit(world)
    started = time.monotonic()
    summary = jobs.run()

    assert waiting.job_id in summary.started
    assert time.monotonic() - started < 5
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.RUNNING
    assert last_applied_token(manager.LEASE_NAME) > applied


CRASHING_PASS = """
import django
django.setup()
from backend.jobmanager import manager
from jobmanager.backends.memory import MemoryBackend
manager.run_job_manager(MemoryBackend(), lambda deployments: None)
"""


@pytest.mark.django_db(transaction=True)
def test_a_job_manager_killed_mid_pass_holds_the_next_pass_up_seconds_not_a_minute(
    world, own_redis, jobs, settings
):
    env = os.environ | {
        "DATABASE_URL": session_database_url(),
        "REDIS_URL": own_redis.url,
        "TRAINYARD_REDIS_PREFIX": settings.TRAINYARD_REDIS_PREFIX,
        "TRAINYARD_CRASH_AT": "jobmanager-round",  # SIGKILLs itself with the lease held
    }
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_PASS], cwd=ROOT, env=env, timeout=120, check=False
    )
    killed_at = time.monotonic()
    assert crashed.returncode == -9
    job = submit(world)

    first = jobs.run()
    assert first.lease_taken_by_another  # the dead holder's lease is still there
    while (summary := jobs.run()).rounds == 0:
        assert time.monotonic() - killed_at < 10, "the dead job manager's lease outlived 10 s"
        time.sleep(0.2)
    assert job.job_id in summary.started
