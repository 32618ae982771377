"""gunicorn's control socket (gunicornc) is one per instance under the var dir: two servers
run by one account no longer share one in ~/.gunicorn and delete each other's."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys

import pytest

from tests.polling import wait_until
from tests.servers import ROOT, free_port, is_healthy, kill_process_group

pytestmark = pytest.mark.integration


def start(var_dir, home) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = os.environ | {
        "TRAINYARD_VAR_DIR": str(var_dir),
        "HOME": str(home),
        "WEB_CONCURRENCY": "1",
        "DATABASE_URL": f"sqlite:///{var_dir}/db.sqlite3",  # /healthz asks only SELECT 1
    }
    env.pop("XDG_RUNTIME_DIR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "backend.wsgi", "--config", "deploy/gunicorn.conf.py",
         "--bind", f"127.0.0.1:{port}", "--access-logfile", "/dev/null"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    wait_until(lambda: is_healthy(base_url), 60, "gunicorn to answer")
    return process, base_url


def answers(path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(str(path))
        except OSError:
            return False
    return True


def test_two_servers_of_one_account_keep_their_own_control_sockets(tmp_path):
    var_dir, home = tmp_path / "var", tmp_path / "home"
    home.mkdir()
    first, _ = start(var_dir, home)
    second = None
    try:
        second, _ = start(var_dir, home)
        sockets = {process.pid: var_dir / "run" / f"gunicorn-{process.pid}.ctl"
                   for process in (first, second)}  # fmt: skip
        wait_until(lambda: all(path.exists() for path in sockets.values()), 30, "the sockets")
        assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in sockets.values())
        assert not (home / ".gunicorn").exists()

        os.killpg(first.pid, signal.SIGTERM)  # the first stops, tidying up after itself
        first.wait(timeout=30)

        assert not sockets[first.pid].exists()
        assert answers(sockets[second.pid])  # the second's is still there, and answers
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                kill_process_group(process)
