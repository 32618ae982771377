"""``manage.py watch_job_ends``: a worker's reported end asks for a job manager run at
once (the request a submission makes), without waiting for beat's next pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from backend.core.redis import redis_client, redis_key
from backend.jobmanager import manager
from tests.polling import wait_until

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.fixture
def watcher(tmp_path, redis_namespace):
    socket_path = tmp_path / "ends.sock"
    env = os.environ | {
        "REDIS_URL": settings.REDIS_URL,
        "TRAINYARD_REDIS_PREFIX": redis_namespace,
        "TRAINYARD_CELERY_QUEUE": f"{redis_namespace}-queue",  # nobody consumes it
        "TRAINYARD_LOCAL_NOTIFY_SOCKET": str(socket_path),
        "TRAINYARD_VAR_DIR": str(tmp_path / "var"),
    }
    process = subprocess.Popen(
        [sys.executable, "manage.py", "watch_job_ends"], cwd=REPOSITORY, env=env
    )
    try:
        wait_until(socket_path.exists, 60, "the watcher to listen")
        yield socket_path
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def test_a_reported_end_asks_for_a_job_manager_run(watcher, tmp_path):
    requested = redis_key(manager.LEASE_NAME, "requested")
    assert not redis_client().exists(requested)
    status_file = tmp_path / "state" / "j123" / "a1-worker-0.status.json"

    # As an init does, as the last thing before it exits (the watcher waits for the exit).
    script = "import sys; from jobmanager.backends.local_init import notify_end; "
    script += "notify_end(sys.argv[1], sys.argv[2])"
    subprocess.run(
        [sys.executable, "-c", script, str(watcher), str(status_file)], cwd=REPOSITORY, check=True
    )

    wait_until(lambda: redis_client().exists(requested), 30, "a job manager run requested")


def test_the_watcher_s_socket_is_its_own(watcher):
    assert watcher.stat().st_mode & 0o777 == 0o600
