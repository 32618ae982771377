"""run_trainyard holds the web server's socket across its restarts (issue 33): a request
made while a killed gunicorn is down waits in the socket's queue and is answered by the
gunicorn started next, not refused. Real gunicorn processes, no database."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from backend.operations.management.commands.run_trainyard import Child, HeldUnixSocket
from tests.backend.operations.test_restart_backoff import died
from tests.polling import wait_until
from tests.servers import ROOT


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=60)
        self.path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def status_of_get(path: Path) -> int | None:
    connection = UnixConnection(path)
    try:
        connection.request("GET", "/")
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


@pytest.fixture
def web(tmp_path):
    """A supervised gunicorn (one sync worker, the smallest app) on a held socket."""
    held = HeldUnixSocket(tmp_path / "run" / "web.sock")
    command = [sys.executable, "-m", "gunicorn", "tests.backend.hello_wsgi:app",
               "--bind", f"fd://{held.fd}", "--workers", "1"]  # fmt: skip
    child = Child("web", command, dict(os.environ), ROOT, held=held)
    yield child, held
    if child.process is not None:
        os.killpg(child.process.pid, signal.SIGKILL)
        child.process.wait()
    held.close()


def test_a_request_made_while_the_web_server_is_down_is_answered_by_the_next_one(web):
    child, held = web
    victim = child.start()
    wait_until(lambda: status_of_get(held.path) == 200, 60, "gunicorn's first answer")

    victim.send_signal(signal.SIGKILL)
    assert died(child) == -signal.SIGKILL
    waiting = UnixConnection(held.path)
    waiting.request("GET", "/")  # nothing serves the socket now: the request waits
    child.start()

    assert waiting.getresponse().status == 200


def test_a_web_server_that_stopped_by_itself_is_given_its_socket_again(web):
    child, held = web
    first = child.start()
    wait_until(lambda: status_of_get(held.path) == 200, 60, "gunicorn's first answer")

    first.send_signal(signal.SIGTERM)  # a graceful stop removes the socket's path
    assert died(child) == 0
    assert not held.path.exists()
    child.start()

    wait_until(lambda: status_of_get(held.path) == 200, 60, "the next gunicorn's answer")
