"""`make run` on a fresh machine: embedded SQLite and Redis, demo data, web + worker + beat."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import psutil
import pytest
import requests

from tests.servers import ROOT, free_port, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def trainyard(tmp_path):
    """`manage.py run_trainyard` with nothing configured, in an empty var directory."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["TRAINYARD_VAR_DIR"] = str(tmp_path / "var")
    env["PYTHONUNBUFFERED"] = "1"
    output = tmp_path / "output.log"
    with output.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "run_trainyard", "--port", str(port)],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    yield process, output, env, f"http://localhost:{port}"
    stop_everything_started_under(process, tmp_path)


def stop_everything_started_under(process: subprocess.Popen, var_dir) -> None:
    """After a failed test, leave nothing running: the launcher, its children, and the
    embedded Redis (which daemonizes, so it is found by its var directory)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
            process.kill()
            process.wait()
    for leftover in psutil.process_iter(["cmdline"]):
        if any(str(var_dir) in part for part in leftover.info["cmdline"] or []):
            leftover.kill()


def signed_in(base_url: str, username: str, password: str) -> requests.Session:
    """A session signed in through the browsable API's login form, sending its CSRF token."""
    session = requests.Session()
    session.get(f"{base_url}/api/auth/login/", timeout=10)
    answer = session.post(
        f"{base_url}/api/auth/login/",
        data={"username": username, "password": password, "next": "/api/v1/me/",
              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        headers={"Referer": f"{base_url}/api/auth/login/"},
        timeout=10,
    )  # fmt: skip
    assert answer.json()["username"] == username
    session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
    return session


def test_nodes_registered_cordoned_and_removed_while_it_runs_take_effect_at_once(
    trainyard, tmp_path
):
    _, output, _, base_url = trainyard
    wait_until(lambda: "Press Ctrl-C to stop." in output.read_text(), 120, "the banner")
    logins = dict(re.findall(r"^\s+(\w+)\s+/\s+(\S+)", output.read_text(), re.MULTILINE))
    assert "registered nodes (a100-01 ...; nodes registered later too)" in output.read_text()
    admin = signed_in(base_url, "admin", logins["admin"])
    alice = signed_in(base_url, "alice", logins["alice"])
    api = f"{base_url}/api/v1"

    node = {"name": "a100-new", "gpu_type": "A100", "gpus": 8, "cpus": 96, "memory": "1000Gi",
            "labels": {"pool": "fresh"}}  # fmt: skip
    assert admin.post(f"{api}/nodes/", json=node, timeout=10).status_code == 201
    release = tmp_path / "release"
    job = {"vc": "vision", "gpu_type": "A100", "gpus_per_worker": 8,
           "node_selector": {"pool": "fresh"},
           "command": f"while [ ! -e {release} ]; do sleep 0.1; done; echo drained"}  # fmt: skip
    first = alice.post(f"{api}/jobs/", json=job, timeout=10).json()["id"]

    def status_of(job_id: str) -> dict:
        return alice.get(f"{api}/jobs/{job_id}/", timeout=10).json()

    wait_until(lambda: status_of(first)["status"] == "running", 60, "a job on the new node")
    assert {worker["node"] for worker in status_of(first)["placement"]} == {"a100-new"}

    assert admin.post(f"{api}/nodes/a100-new/cordon/", timeout=10).status_code == 200
    second = alice.post(f"{api}/jobs/", json=job | {"gpus_per_worker": 4}, timeout=10).json()["id"]
    wait_until(lambda: status_of(second)["insight_message"], 60, "the job manager's look")
    assert status_of(second)["status"] == "queued"  # 4 GPUs free there, but cordoned

    removal = admin.delete(f"{api}/nodes/a100-new/", timeout=10)
    assert removal.status_code == 202 and removal.json()["removal_requested_at"]
    assert status_of(first)["status"] == "running"  # drained, not killed
    release.touch()
    wait_until(lambda: status_of(first)["status"] == "finished", 60, "the job to finish")
    wait_until(
        lambda: admin.get(f"{api}/nodes/a100-new/", timeout=10).status_code == 404,
        30,
        "the drained node to go",
    )


def test_run_starts_the_whole_system_with_demo_logins_and_stops_cleanly(trainyard):
    process, output, env, base_url = trainyard
    wait_until(lambda: "Press Ctrl-C to stop." in output.read_text(), 120, "the banner")
    banner = output.read_text()
    assert f"Trainyard is running at {base_url}/" in banner
    logins = dict(re.findall(r"^\s+(\w+)\s+/\s+(\S+)", banner, re.MULTILINE))
    assert "admin" in logins and "alice" in logins
    worker_ready = re.compile(r"celery@\S+ ready\.")
    wait_until(lambda: worker_ready.search(output.read_text()), 120, "the Celery worker")

    # A demo user signs in with the printed password and submits a job.
    session = requests.Session()
    login_page = session.get(f"{base_url}/api/auth/login/", timeout=10)
    assert login_page.status_code == 200
    signed_in = session.post(
        f"{base_url}/api/auth/login/",
        data={"username": "alice", "password": logins["alice"], "next": "/api/v1/me/",
              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        headers={"Referer": f"{base_url}/api/auth/login/"},
        timeout=10,
    )  # fmt: skip
    assert signed_in.json()["username"] == "alice"
    submitted = session.post(
        f"{base_url}/api/v1/jobs/",
        json={"vc": "vision", "gpu_type": "A100", "command": "python train.py"},
        headers={"X-CSRFToken": session.cookies["csrftoken"]},
        timeout=10,
    )
    assert submitted.status_code == 201, submitted.text
    summary = session.get(f"{base_url}/api/v1/cluster/summary/", timeout=10).json()
    assert {row["gpu_type"] for row in summary["gpu_types"]} == {"A100", "V100", "cpu"}

    # The broker is the embedded Redis, and the worker answers on it.
    broker = re.search(r"Embedded Redis on (\S+)", banner).group(1)
    ping = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "backend", "inspect", "ping", "--timeout", "10"],
        cwd=ROOT, env=env | {"REDIS_URL": f"redis+socket://{broker}"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "pong" in ping.stdout, ping.stdout + ping.stderr

    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [], f"left running: {[p.cmdline() for p in alive]}"
