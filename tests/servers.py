"""Real servers for integration tests: gunicorn on the test database, and friends."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import requests
from django.db import connection

from tests.polling import wait_until
from tests.unix_accounts import TEST_ACCOUNT_ENV

ROOT = Path(__file__).resolve().parent.parent


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port of 127.0.0.1 free now and not handed out before by this process (the kernel
    may give a port just let go again: two calls in a row could return the same one)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def session_database_url() -> str:
    """A DATABASE_URL naming the database this test session created."""
    settings = connection.settings_dict
    if "sqlite" in settings["ENGINE"]:
        return f"sqlite:///{settings['NAME']}"
    credentials = quote(settings["USER"] or "")
    if settings["PASSWORD"]:
        credentials += ":" + quote(settings["PASSWORD"])
    return (
        f"mysql://{credentials}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 3306}"
        f"/{settings['NAME']}"
    )


def answers(url: str) -> int | None:
    """The status a GET of ``url`` is answered with; None when nothing answers."""
    try:
        return requests.get(url, timeout=1).status_code
    except requests.RequestException:
        return None


def is_healthy(base_url: str) -> bool:
    try:
        return requests.get(f"{base_url}/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def start_gunicorn(
    extra_env: dict[str, str] | None = None,
    workers: int = 1,
    threads: int = 1,
    arguments: tuple[str, ...] = (),
) -> tuple[subprocess.Popen, str]:
    """Serve the app on the test database with gunicorn; return the process and its URL.
    ``arguments``: more of gunicorn's (``--config deploy/gunicorn.conf.py``, say)."""
    port = free_port()
    env = os.environ | {"DATABASE_URL": session_database_url()} | TEST_ACCOUNT_ENV
    env |= {"TRAINYARD_HEALTH_BIND": ""}  # no health server unless the test asks for one
    env |= extra_env or {}
    var_dir = Path(env.get("TRAINYARD_VAR_DIR") or ROOT / "var")
    control_socket = var_dir / "run" / f"gunicorn-{port}.ctl"  # one per instance
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "backend.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--threads", str(threads), "--log-level", "warning",
         "--control-socket", str(control_socket), *arguments],
        cwd=ROOT,
        env=env,
        start_new_session=True,  # its own process group, so that the workers die with it
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: is_healthy(base_url), 30, "gunicorn to answer /healthz")
    except BaseException:
        kill_process_group(process)
        raise
    return process, base_url


def live_env(directory: Path, redis_url: str, label: str) -> dict[str, str]:
    """The environment of servers and workers started for one test: the test database,
    Redis with a namespace and a Celery queue of their own, logs and var/ under
    ``directory``, and the job manager woken by submissions."""
    run = f"trainyard-{label}-{uuid.uuid4().hex}"
    return {
        "DATABASE_URL": session_database_url(),
        "REDIS_URL": redis_url,
        "TRAINYARD_REDIS_PREFIX": run,
        "TRAINYARD_CELERY_QUEUE": run,
        "TRAINYARD_LOG_DIR": str(directory / "logs"),
        "TRAINYARD_VAR_DIR": str(directory / "var"),
        "TRAINYARD_TRIGGER_JOB_MANAGER": "true",
    }


def start_celery(env: dict[str, str], *arguments: str) -> subprocess.Popen:
    """``celery -A backend <arguments>`` (a worker, beat) with ``env`` over this process's
    environment, in a process group of its own (for ``kill_process_group``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "backend", *arguments, "--loglevel", "WARNING"],
        cwd=ROOT,
        env=os.environ | TEST_ACCOUNT_ENV | env,
        start_new_session=True,
    )


def kill_process_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal a server and every process it started, then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    process.wait(timeout=30)
