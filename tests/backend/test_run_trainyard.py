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
