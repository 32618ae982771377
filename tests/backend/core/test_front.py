"""The front (nginx before gunicorn, backend/core/front.py): slow clients hold nginx's
connections, not the request workers; behind it, /metrics still tells root from a job,
sign-in throttling still counts each client's own address, and an oversized body is
refused as the API refuses it."""

from __future__ import annotations

import http.client
import json
import socket
import time

import pytest
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from backend.accounts.actions import create_api_token
from backend.core.front import HEADER_SECONDS, front_client
from tests.backend.front_support import as_account, front_stack, slow_clients
from tests.factories import PASSWORD
from tests.unix_accounts import job_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
PROMPT_SECONDS = 2.0


def test_slow_requests_from_a_job_and_from_loopback_leave_the_api_answering(world, tmp_path):
    """The attack of issue 29: 16 requests trickling a header line at a time (half from a
    job's account) held both sync workers of gunicorn alone; through the front a signed-in
    user's GET /api/v1/me/ answers at once."""
    token = create_api_token(world.member, "front")[1]
    with front_stack(tmp_path / "var", workers=2) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        with slow_clients(port, 8, job_account("alice")), slow_clients(port, 8):
            for _ in range(3):
                started = time.monotonic()
                me = requests.get(
                    f"{base_url}/api/v1/me/",
                    headers={"Authorization": f"Token {token}"},
                    timeout=10,
                )
                assert me.status_code == 200 and me.json()["username"] == "mia"
                assert time.monotonic() - started < PROMPT_SECONDS


def test_a_client_that_stalls_in_its_headers_is_dropped_after_the_header_timeout(db, tmp_path):
    with front_stack(tmp_path / "var", workers=1) as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as stalled:
            stalled.sendall(b"GET /api/v1/me/ HTTP/1.1\r\nHost: localhost\r\n")
            opened = time.monotonic()
            stalled.settimeout(HEADER_SECONDS * 3)
            try:
                answer = stalled.recv(1024)
            except ConnectionResetError:  # reset_timedout_connection
                answer = b""
            held = time.monotonic() - opened

    assert answer == b""
    assert HEADER_SECONDS - 1 < held < HEADER_SECONDS * 3


SCRAPE = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
    "except urllib.error.HTTPError as error:\n"
    "    print(error.code, error.read().decode())\n"
)


def test_metrics_behind_the_front_tell_root_from_a_job(db, tmp_path):
    with front_stack(tmp_path / "var", workers=1) as base_url:
        assert requests.get(f"{base_url}/metrics", timeout=10).status_code == 200  # root
        scrape = as_account(job_account("alice"), "-c", SCRAPE, f"{base_url}/metrics")
        answer, _ = scrape.communicate(timeout=60)

    status, _, body = answer.partition(" ")
    assert status == "403"
    assert "jobs run here as their owners" in json.loads(body)["detail"]


def sign_in(base_url: str, source: str, username: str, password: str) -> int:
    """The API's sign-in from the loopback address ``source``; its status."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    body = json.dumps({"username": username, "password": password})
    connection.request(
        "POST", "/api/v1/auth/login/", body, headers={"Content-Type": "application/json"}
    )
    status = connection.getresponse().status
    connection.close()
    return status


def test_sign_in_throttling_behind_the_front_counts_each_clients_own_address(world, tmp_path):
    """A user locked out at one address for its failures there may still sign in from
    another (the app sees the client's address, not the front's socket, which every
    client would share)."""
    # Hashed as the server (with the production hashers) can check it.
    world.vc_admin.password = PBKDF2PasswordHasher().encode(PASSWORD, "front-salt")
    world.vc_admin.save(update_fields=["password"])
    with front_stack(tmp_path / "var", workers=1) as base_url:
        failures = [sign_in(base_url, "127.0.0.2", "vera", "wrong") for _ in range(10)]
        assert failures[-1] == 429  # vera's ten failures from 127.0.0.2: locked there

        assert sign_in(base_url, "127.0.0.2", "vera", PASSWORD) == 429
        assert sign_in(base_url, "127.0.0.3", "vera", PASSWORD) == 200


def test_a_body_over_the_apis_limit_is_refused_by_the_front_as_the_api_refuses_it(world, tmp_path):
    token = create_api_token(world.member, "front")[1]
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    with front_stack(tmp_path / "var", workers=1, TRAINYARD_MAX_JSON_BYTES="10000") as base_url:
        over = requests.post(f"{base_url}/api/v1/jobs/", data=b"x" * 10_001, headers=headers,
                             timeout=10)  # fmt: skip
        within = requests.post(f"{base_url}/api/v1/jobs/", data=b"x" * 10_000, headers=headers,
                               timeout=10)  # fmt: skip

    assert over.status_code == 413
    assert over.json() == {"detail": "The request body is larger than 10000 bytes."}
    assert within.status_code == 400  # read by the API: not JSON


class _Tcp:
    family = socket.AF_INET


def test_the_fronts_header_is_believed_only_over_the_unix_socket():
    """A client that reaches gunicorn over TCP (a deployment binding a port) cannot claim
    another client's address: the header is dropped, the connection's address kept."""
    environ = {"REMOTE_ADDR": "10.0.0.9", "REMOTE_PORT": "5000", "gunicorn.socket": _Tcp(),
               "HTTP_X_TRAINYARD_FRONT": "127.0.0.1 40000 127.0.0.1 8000"}  # fmt: skip

    front_client(environ)

    assert environ == {
        "REMOTE_ADDR": "10.0.0.9",
        "REMOTE_PORT": "5000",
        "gunicorn.socket": environ["gunicorn.socket"],
    }
