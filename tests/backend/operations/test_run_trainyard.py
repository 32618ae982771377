"""`make run` on a fresh machine: embedded SQLite and Redis, demo data, web + worker + beat;
as root with the demo users' Unix accounts (jobs run as their owners), and as a normal
account in single-user mode (every job runs as that account, and it says so)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import requests

from tests.backend.front_support import slow_clients
from tests.backend.gateway_support import listening
from tests.polling import wait_until
from tests.servers import ROOT, free_port, is_healthy
from tests.unix_accounts import (
    JOB_PYTHON,
    JOB_PYTHONPATH,
    TEST_ACCOUNT_ENV,
    job_account,
    reachable_directory,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def trainyard(host_tmp):
    """`manage.py run_trainyard` with nothing configured (but test accounts' names and
    uids), in an empty var directory that the demo users' jobs can pass through; the
    test's ``shared`` directory seen by their sandboxes."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["TRAINYARD_VAR_DIR"] = str(host_tmp / "var")
    (host_tmp / "shared").mkdir()
    (host_tmp / "shared").chmod(0o755)
    env["TRAINYARD_LOCAL_SANDBOX_PATHS"] = str(host_tmp / "shared")
    env["TRAINYARD_SSH_PORT"] = str(free_port())
    env["TRAINYARD_ENDPOINTS_PORT"] = str(free_port())
    env["PYTHONUNBUFFERED"] = "1"
    env |= TEST_ACCOUNT_ENV
    output = host_tmp / "output.log"
    with output.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "run_trainyard", "--port", str(port)],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    yield process, output, env, f"http://localhost:{port}"
    stop_everything_started_under(process, host_tmp)


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


def started(output, process, seconds: float = 180) -> tuple[str, dict[str, str]]:
    """The banner, once the web server and the Celery worker are up, and its logins."""

    def banner_shown() -> bool:
        assert process.poll() is None, f"run_trainyard exited:\n{output.read_text()[-3000:]}"
        return "Press Ctrl-C to stop." in output.read_text()

    wait_until(banner_shown, seconds, "the banner")
    worker_ready = re.compile(r"celery@\S+ ready\.")
    wait_until(lambda: worker_ready.search(output.read_text()), seconds, "the Celery worker")
    banner = output.read_text()
    return banner, dict(re.findall(r"^\s+(\w+)\s+/\s+(\S+)", banner, re.MULTILINE))


def run_a_job_as(base_url: str, username: str, password: str, command: str) -> dict:
    """Sign in as a demo user with the printed password, submit ``command`` and wait for
    it to end; its detail, with its log and the cluster summary."""
    session = requests.Session()
    login_page = session.get(f"{base_url}/api/auth/login/", timeout=10)
    assert login_page.status_code == 200
    signed_in = session.post(
        f"{base_url}/api/auth/login/",
        data={"username": username, "password": password, "next": "/api/v1/me/",
              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        headers={"Referer": f"{base_url}/api/auth/login/"},
        timeout=10,
    )  # fmt: skip
    assert signed_in.json()["username"] == username
    submitted = session.post(
        f"{base_url}/api/v1/jobs/",
        json={"vc": "vision", "gpu_type": "A100", "command": command},
        headers={"X-CSRFToken": session.cookies["csrftoken"]},
        timeout=10,
    )
    assert submitted.status_code == 201, submitted.text
    url = f"{base_url}/api/v1/jobs/{submitted.json()['id']}/"

    def ended() -> dict | None:
        job = session.get(url, timeout=10).json()
        return job if job["status"] in ("finished", "failed") else None

    wait_until(ended, 120, "the job to end")
    job = ended()
    job["log"] = session.get(f"{url}log/", timeout=10).text
    job["summary"] = session.get(f"{base_url}/api/v1/cluster/summary/", timeout=10).json()
    return job


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
    trainyard, host_tmp
):
    process, output, _, base_url = trainyard
    banner, logins = started(output, process)
    assert "registered nodes (a100-01 ...; nodes registered later too)" in banner
    admin = signed_in(base_url, "admin", logins["admin"])
    alice = signed_in(base_url, "alice", logins["alice"])
    api = f"{base_url}/api/v1"

    node = {"name": "a100-new", "gpu_type": "A100", "gpus": 8, "cpus": 96, "memory": "1000Gi",
            "labels": {"pool": "fresh"}}  # fmt: skip
    assert admin.post(f"{api}/nodes/", json=node, timeout=10).status_code == 201
    release = host_tmp / "shared" / "release"  # where the job, sandboxed, sees it
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


def child_running(process: subprocess.Popen, role: str) -> psutil.Process | None:
    """run_trainyard's ``web`` (gunicorn), ``celery worker`` or ``celery beat`` child, if it
    has one now."""
    for child in psutil.Process(process.pid).children():
        with contextlib.suppress(psutil.Error):
            command = child.cmdline()
            if role == "web" and "gunicorn" in command:
                return child
            if "celery" in command and role in command:
                return child
    return None


def stops_cleanly(process: subprocess.Popen, var_dir) -> None:
    """Ctrl-C stops every server it started, the embedded Redis (which daemonizes, so is
    no child of it) included."""
    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [], f"left running: {[p.cmdline() for p in alive]}"
    left = [
        leftover.info["cmdline"]
        for leftover in psutil.process_iter(["cmdline"])
        if any(str(var_dir) in part for part in leftover.info["cmdline"] or [])
    ]
    assert left == [], f"left running: {left}"


def test_run_as_root_starts_the_whole_system_with_demo_logins_and_their_accounts(trainyard):
    """Up with the demo logins, each user's jobs as their own account; the web server killed
    -9 answers again within seconds; a worker and beat killed -9 are restarted (jobs still
    run); Ctrl-C stops everything. One start serves all of it: on a loaded two-core machine
    a start takes a minute."""
    process, output, env, base_url = trainyard
    banner, logins = started(output, process)
    assert f"Trainyard is running at {base_url}/" in banner
    assert "admin" in logins and "alice" in logins
    alice = job_account("alice")  # provisioned by make run, as every demo user's
    assert "Every job runs as its owner's Unix account" in banner
    assert "Each job runs in a runc container of its own" in banner  # the default as root
    assert f"alice  -> ty-test-alice (uid {alice.uid})" in banner
    ssh_port = env["TRAINYARD_SSH_PORT"]
    assert re.search(rf"SSH into running jobs: ssh -p {ssh_port} .* \(host key SHA256:", banner)
    assert listening(int(ssh_port))  # the gateway

    # The web server killed -9 answers again within 3 s (times the suite's deadline scale).
    victim = child_running(process, "web")
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_until(
        lambda: (
            (web := child_running(process, "web")) is not None
            and web.pid != victim.pid
            and is_healthy(base_url)
        ),
        3,
        "a 200 from the web server started again",
    )
    print(f"the web server answered 200 {time.monotonic() - killed:.2f} s after its kill -9")
    assert "web exited with -9; restarting it in 0.0 s" in output.read_text()

    for role in ("worker", "beat"):
        victim = child_running(process, role)
        victim.send_signal(signal.SIGKILL)
        wait_until(
            lambda role=role, victim=victim: (
                (child := child_running(process, role)) is not None and child.pid != victim.pid
            ),
            60,
            f"a new {role}",
        )
        assert process.poll() is None
        assert f"{role} exited with -9; restarting it in" in output.read_text()

    job = run_a_job_as(base_url, "alice", logins["alice"], "id -un; id -u")

    assert job["status"] == "finished", job
    assert job["log"].split()[-2:] == ["ty-test-alice", str(alice.uid)]
    assert job["run_as"] == f"ty-test-alice (uid {alice.uid}, gid {alice.gid})"
    assert {row["gpu_type"] for row in job["summary"]["gpu_types"]} == {"A100", "V100", "cpu"}
    assert job["summary"]["tenancy"]["mode"] == "multi-tenant"

    # The broker is the embedded Redis, and the worker answers on it.
    broker = re.search(r"Embedded Redis on (\S+)", banner).group(1)
    ping = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "backend", "inspect", "ping", "--timeout", "10"],
        cwd=ROOT, env=env | {"REDIS_URL": f"redis+socket://{broker}"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "pong" in ping.stdout, ping.stdout + ping.stderr

    # Issue 29's attack: slow requests from alice's job account and from loopback, a header
    # line at a time, leave the API answering (nginx holds them, not gunicorn's workers).
    port = int(base_url.rsplit(":", 1)[1])
    alice_session = signed_in(base_url, "alice", logins["alice"])
    with slow_clients(port, 8, alice), slow_clients(port, 8):
        for _ in range(3):
            asked_at = time.monotonic()
            assert alice_session.get(f"{base_url}/api/v1/me/", timeout=10).status_code == 200
            assert time.monotonic() - asked_at < 2
    stops_cleanly(process, env["TRAINYARD_VAR_DIR"])
    said = output.read_text()
    assert "Redis shutdown failed" not in said  # its embedded Redis stopped as asked
    assert "keeps running" not in said and "keep running" not in said  # its job ended


def test_run_as_a_normal_account_is_single_user_mode_and_says_so():
    portal = job_account("portal")  # a laptop's user: not root
    with reachable_directory() as directory:
        os.chown(directory, portal.uid, portal.gid)
        port = free_port()
        env = {"PATH": os.environ["PATH"], "HOME": portal.home, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": JOB_PYTHONPATH, "TRAINYARD_VAR_DIR": f"{directory}/var",
               "TRAINYARD_SSH_PORT": str(free_port()),
               "TRAINYARD_ENDPOINTS_PORT": str(free_port())}  # fmt: skip
        output = directory / "output.log"
        with output.open("w") as sink:
            os.chown(output, portal.uid, portal.gid)
            process = subprocess.Popen(
                ["setpriv", f"--reuid={portal.uid}", f"--regid={portal.gid}", "--init-groups",
                 JOB_PYTHON, "manage.py", "run_trainyard", "--port", str(port)],
                cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            banner, logins = started(output, process, seconds=300)
            base_url = f"http://localhost:{port}"
            assert (
                "Single-user mode: the portal does not run as root, so every job runs as its "
                f"account ty-test-portal (uid {portal.uid})"
            ) in banner

            job = run_a_job_as(base_url, "bob", logins["bob"], "id -u")

            assert job["status"] == "finished", job
            assert job["log"].split()[-1] == str(portal.uid)  # the portal's own account
            assert job["run_as"].endswith("the portal's own account (single-user mode)")
            assert job["summary"]["tenancy"]["mode"] == "single-user"
            assert "jobs are not isolated" in job["summary"]["tenancy"]["message"]
            stops_cleanly(process, directory)
        finally:
            stop_everything_started_under(process, directory)
