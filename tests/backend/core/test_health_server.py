"""The health server answers probes at once while every request worker is held up, and
says the web tier is not ready meanwhile."""

from __future__ import annotations

import socket
import time

import pytest
import requests

from tests.fault_servers import own_port
from tests.polling import wait_until
from tests.servers import answers, kill_process_group, start_gunicorn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_probes_are_answered_while_the_only_request_worker_is_stuck_and_it_is_not_ready():
    health = f"127.0.0.1:{own_port()}"
    web, base_url = start_gunicorn(
        extra_env={"TRAINYARD_HEALTH_BIND": health},
        workers=1,
        arguments=("--config", "deploy/gunicorn.conf.py", "--access-logfile", "/dev/null"),
    )
    try:
        wait_until(lambda: answers(f"http://{health}/livez") == 200, 30, "the health server")
        wait_until(lambda: answers(f"http://{health}/healthz") == 200, 30, "ready (a free worker)")
        port = int(base_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as stuck:
            # A client that never ends its headers holds the one sync worker in reading them
            # (a body promised and never sent held it only as long as the app meant to read
            # it: a request refused before its body was read freed the worker at once).
            stuck.sendall(b"POST /api/v1/jobs/ HTTP/1.1\r\nHost: localhost\r\n")
            wait_until(lambda: answers(f"{base_url}/healthz") is None, 30, "the web port to hang")

            started = time.monotonic()
            live = requests.get(f"http://{health}/livez", timeout=1)
            assert time.monotonic() - started < 1
            ready = requests.get(f"http://{health}/healthz", timeout=10)  # the workers get 1 s

            assert ready.status_code == 503
            busy = {"status": "busy", "web": "No request worker answered within 1 s."}
            assert ready.json() == busy
            assert live.status_code == 200
            assert answers(f"http://{health}/nothing") == 404
    finally:
        kill_process_group(web)
    # Gone with its master.
    wait_until(lambda: answers(f"http://{health}/livez") is None, 30, "the health server to go")
