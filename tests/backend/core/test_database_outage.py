"""MariaDB stopped under a running system (a server of this test's own) and started again:
the API answers 503 JSON with Retry-After meanwhile, no acknowledged job is lost, and
the same web server, worker and beat carry on by themselves when it is back."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from jobmanager.backends.memory import MemoryBackend
from tests import servers
from tests.fault_servers import MariaDBServer, own_port
from tests.polling import wait_until
from tests.servers import ROOT, answers, kill_process_group, start_celery, start_gunicorn

pytestmark = pytest.mark.integration

SEED = """
import django
django.setup()
from backend.accounts.actions import create_api_token
from tests.factories import *
gpu = GpuTypeFactory(name="V100", cpus_per_gpu=4, memory_per_gpu=16 * 1024)
for index in range(4):
    NodeFactory(name=f"v100-{index}", gpu_type=gpu, gpus=4, cpus=16, memory=64 * 1024)
vc = VirtualClusterFactory(name="ops")
QuotaFactory(vc=vc, gpu_type=gpu, gpus=16, cpus=64, memory=256 * 1024)
user = UserFactory(username="dana")
MembershipFactory(vc=vc, user=user)
print(create_api_token(user, "outage")[1])
"""
JOBS_OF = """
import django, json
django.setup()
from backend.jobs.models import Job
print(json.dumps(list(Job.objects.values_list("job_id", "status"))))
"""


@pytest.fixture
def mariadb():
    server = MariaDBServer()
    yield server
    server.close()


def manage(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=os.environ | env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_mariadb_stopped_and_started_answers_503_json_then_resumes_by_itself(
    mariadb, tmp_path, redis_url
):
    mariadb.sql("CREATE DATABASE trainyard CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    env = servers.live_env(tmp_path, redis_url, "outage") | {
        "DATABASE_URL": mariadb.url("trainyard"),
        "TRAINYARD_BACKEND": "memory",
        "TRAINYARD_MEMORY_BACKEND_STATE": str(tmp_path / "memory-backend.json"),
        "TRAINYARD_JOB_MANAGER_INTERVAL": "1",
    }
    manage(env, "manage.py", "migrate", "--noinput", "-v0")
    token = manage(env, "-c", SEED).split()[-1]
    health = f"http://127.0.0.1:{own_port()}"
    env["TRAINYARD_HEALTH_BIND"] = health.removeprefix("http://")
    web, base_url = start_gunicorn(
        extra_env=env,
        workers=2,
        arguments=("--config", "deploy/gunicorn.conf.py", "--access-logfile", "/dev/null"),
    )
    worker = start_celery(env, "worker", "--concurrency", "1", "--without-gossip",
                          "--without-mingle", "--without-heartbeat")  # fmt: skip
    beat = start_celery(env, "beat", "--schedule", str(tmp_path / "celerybeat-schedule"))
    api = f"{base_url}/api/v1"
    headers = {"Authorization": f"Token {token}"}
    body = {"vc": "ops", "command": "python train.py", "gpus_per_worker": 1}
    acknowledged: list[str] = []

    def submit() -> requests.Response:
        response = requests.post(f"{api}/jobs/", json=body, headers=headers, timeout=30)
        if response.status_code == 201:
            acknowledged.append(response.json()["id"])
        return response

    try:
        for _ in range(4):
            assert submit().status_code == 201

        mariadb.stop()
        for answer in (
            requests.get(f"{api}/jobs/", headers=headers, timeout=30),
            submit(),
            requests.get(f"{api}/me/", headers=headers, timeout=30),
        ):
            assert answer.status_code == 503, answer.text
            assert answer.headers["Content-Type"] == "application/json"
            assert int(answer.headers["Retry-After"]) > 0
            assert "database is unavailable" in answer.json()["detail"]
        assert requests.get(f"{base_url}/healthz", timeout=30).status_code == 503
        wait_until(lambda: answers(f"{health}/livez") == 200, 30, "health server")
        assert requests.get(f"{health}/healthz", timeout=5).status_code == 503  # not ready

        mariadb.start()
        wait_until(
            lambda: requests.get(f"{api}/jobs/", headers=headers, timeout=30).status_code == 200,
            60,
            "the API to answer again",
        )
        assert requests.get(f"{health}/healthz", timeout=5).status_code == 200
        for _ in range(4):
            assert submit().status_code == 201
        assert len(acknowledged) == 8

        backend = MemoryBackend(state_path=env["TRAINYARD_MEMORY_BACKEND_STATE"])
        wait_until(lambda: set(backend.deployed()) == set(acknowledged), 60, "all 8 to run")
        rows = json.loads(manage(env, "-c", JOBS_OF))
        assert sorted(job_id for job_id, _ in rows) == sorted(acknowledged)  # once each
        assert {status for _, status in rows} == {"running"}
        assert worker.poll() is None and beat.poll() is None and web.poll() is None
    finally:
        for process in (web, worker, beat):
            kill_process_group(process)


def test_the_first_request_after_a_restart_nobody_saw_is_answered(mariadb, tmp_path, redis_url):
    """MariaDB restarted while the web server's one worker was idle: its kept connection
    is dead, and the next request still succeeds (the connection is checked and replaced
    before use, not found dead in the middle of the request)."""
    mariadb.sql("CREATE DATABASE trainyard CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    env = servers.live_env(tmp_path, redis_url, "restart") | {
        "DATABASE_URL": mariadb.url("trainyard"),
        "TRAINYARD_BACKEND": "memory",
        "TRAINYARD_MEMORY_BACKEND_STATE": str(tmp_path / "memory-backend.json"),
    }
    manage(env, "manage.py", "migrate", "--noinput", "-v0")
    token = manage(env, "-c", SEED).split()[-1]
    web, base_url = start_gunicorn(
        extra_env=env, workers=1, arguments=("--access-logfile", "/dev/null")
    )
    headers = {"Authorization": f"Token {token}"}
    jobs = f"{base_url}/api/v1/jobs/"
    try:
        assert requests.get(jobs, headers=headers, timeout=30).status_code == 200

        mariadb.stop()
        mariadb.start()

        answer = requests.get(jobs, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
    finally:
        kill_process_group(web)
