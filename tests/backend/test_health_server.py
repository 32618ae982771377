"""The health server answers probes at once while every request worker is held up."""

from __future__ import annotations

import socket
import time

import pytest
import requests

from tests.fault_servers import own_port
from tests.servers import answers, kill_process_group, start_gunicorn, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_probes_are_answered_while_the_only_request_worker_is_stuck():
    health = f"127.0.0.1:{own_port()}"
    web, base_url = start_gunicorn(
        extra_env={"TRAINYARD_HEALTH_BIND": health},
        workers=1,
        arguments=("--config", "deploy/gunicorn.conf.py", "--access-logfile", "/dev/null"),
    )
    stuck = socket.create_connection(("127.0.0.1", int(base_url.rsplit(":", 1)[1])))
    try:
        wait_until(lambda: answers(f"http://{health}/livez") == 200, 30, "the health server")
        # A client that promises a body and never sends it holds the one sync worker.
        stuck.sendall(
            b"POST /api/v1/jobs/ HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        wait_until(lambda: answers(f"{base_url}/healthz") is None, 30, "the web port to hang")

        started = time.monotonic()
        ready = requests.get(f"http://{health}/healthz", timeout=1)
        live = requests.get(f"http://{health}/livez", timeout=1)

        assert time.monotonic() - started < 1
        assert (ready.status_code, ready.json()) == (200, {"status": "ok"})
        assert live.status_code == 200
        assert answers(f"http://{health}/nothing") == 404
    finally:
        stuck.close()
        kill_process_group(web)
    # Gone with its master.
    wait_until(lambda: answers(f"http://{health}/livez") is None, 30, "the health server to go")
