"""The web tier as `make run` and the deployment serve it: nginx (backend/core/front.py)
in front of gunicorn on a unix socket, on the test database; and clients run as a job's
account."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobmanager.backends import RunAs
from tests.fault_servers import own_port
from tests.polling import wait_until
from tests.servers import ROOT, is_healthy, kill_process_group, session_database_url
from tests.unix_accounts import JOB_PYTHON, JOB_PYTHONPATH, TEST_ACCOUNT_ENV


@contextmanager
def front_stack(var_dir: Path, workers: int = 2, **extra_env: str) -> Iterator[str]:
    """gunicorn (deploy/gunicorn.conf.py) on ``var_dir/run/gunicorn.sock`` and the front on
    a port of its own; yields the front's URL, stops both whatever happens."""
    upstream = f"unix:{var_dir / 'run' / 'gunicorn.sock'}"
    env = os.environ | TEST_ACCOUNT_ENV | {"DATABASE_URL": session_database_url(),
           "TRAINYARD_VAR_DIR": str(var_dir), "TRAINYARD_HEALTH_BIND": ""} | extra_env  # fmt: skip
    bind = f"127.0.0.1:{own_port()}"
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "backend.wsgi", "--config", "deploy/gunicorn.conf.py",
         "--bind", upstream, "--workers", str(workers), "--access-logfile", "/dev/null",
         "--log-level", "warning"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    front = subprocess.Popen(
        [sys.executable, "-m", "backend.core.front", bind, "--upstream", upstream],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        base_url = f"http://{bind}"
        wait_until(lambda: is_healthy(base_url), 60, "gunicorn to answer through the front")
        yield base_url
    finally:
        kill_process_group(front)
        kill_process_group(web)


def as_account(account: RunAs, *arguments: str, stdin: int | None = None) -> subprocess.Popen:
    """``python <arguments>`` run as ``account`` (a job's), with this repository importable;
    its standard output piped (text)."""
    return subprocess.Popen(
        [JOB_PYTHON, *arguments],
        cwd="/", user=account.uid, group=account.gid, extra_groups=[],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": JOB_PYTHONPATH},
        stdin=stdin, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


@contextmanager
def slow_clients(
    port: int, count: int, account: RunAs | None = None, interval: float = 1.0, seconds: float = 120
) -> Iterator[None]:
    """``count`` slowloris connections to ``port`` (bench/slowloris/slow_clients.py, a header
    line every ``interval`` s for at most ``seconds``), from ``account``'s process or this
    one's account, open when the block starts and closed when it ends."""
    arguments = ("-m", "bench.slowloris.slow_clients", str(port), str(count),
                 "--interval", str(interval), "--seconds", str(seconds))  # fmt: skip
    if account is None:
        process = subprocess.Popen(
            [sys.executable, *arguments],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
    else:
        process = as_account(account, *arguments, stdin=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        assert process.stdout.readline().strip() == f"open {count}"
        yield
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
