"""A real Celery worker rides out its Redis broker being killed (kill -9) and started
again, empty, five times over (a redis-server of the test's own): it never exits, and
after each outage it takes work again."""

from __future__ import annotations

import time

import pytest

from backend.celery import app
from backend.jobmanager import tasks
from jobmanager.backends.memory import MemoryBackend
from tests import servers
from tests.backend.manager_support import submit
from tests.polling import wait_until
from tests.servers import kill_process_group, start_celery

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
OUTAGE_SECONDS = 1.0  # how long the broker stays down each time


def test_the_worker_survives_redis_restarts_and_keeps_working(
    world,
    own_redis,
    tmp_path,
    settings,
):
    env = servers.live_env(tmp_path, own_redis.url, "broker") | {
        "TRAINYARD_REDIS_PREFIX": settings.TRAINYARD_REDIS_PREFIX,
        "TRAINYARD_BACKEND": "memory",
        "TRAINYARD_MEMORY_BACKEND_STATE": str(tmp_path / "memory-backend.json"),
        "TRAINYARD_TRIGGER_JOB_MANAGER": "false",
    }
    backend = MemoryBackend(state_path=env["TRAINYARD_MEMORY_BACKEND_STATE"])
    queue = env["TRAINYARD_CELERY_QUEUE"]
    worker = start_celery(env, "worker", "--concurrency", "2", "--without-gossip",
                          "--without-mingle", "--without-heartbeat")  # fmt: skip

    def ask_for_a_pass(count: int = 1) -> bool:
        try:
            with app.connection_for_write(own_redis.url) as connection:
                for _ in range(count):
                    tasks.run_job_manager.apply_async(queue=queue, connection=connection)
        except Exception:  # the broker is still coming back
            return False
        return True

    def placed(job_id: str) -> bool:
        assert worker.poll() is None, f"the worker exited with {worker.returncode}"
        ask_for_a_pass()
        return job_id in backend.deployed()

    try:
        for outage in range(5):
            job = submit(world)
            wait_until(lambda job=job: placed(job.job_id), 60, f"a pass after outage {outage}")
            ask_for_a_pass(20)  # messages taken and not yet acknowledged when it dies
            own_redis.kill()
            time.sleep(OUTAGE_SECONDS)
            own_redis.start()

        last = submit(world)
        wait_until(lambda: placed(last.job_id), 60, "a pass after the last outage")
        assert worker.poll() is None
    finally:
        kill_process_group(worker)
