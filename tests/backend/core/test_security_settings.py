"""Browser security from the environment: Secure cookies, HSTS and a Content-Security-Policy,
on by default once TRAINYARD_ALLOWED_HOSTS names a host beyond this one's loopback.

Settings are read when Django starts, so each case starts a fresh interpreter with its
environment and asks the real middleware stack, as a browser would over HTTPS."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.servers import ROOT

PROBE = """
import json, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="{host}")
page = client.get("/", secure=True)
docs = client.get("/api/docs/", secure=True)
cookie = page.cookies["csrftoken"]
print(json.dumps({{
    "hsts": page.get("Strict-Transport-Security"),
    "csp": page.get("Content-Security-Policy"),
    "secure_cookie": bool(cookie["secure"]),
    "docs_status": docs.status_code,
    "docs_csp": docs.get("Content-Security-Policy"),
    "docs": docs.content.decode(),
}}))
"""


def served(tmp_path, host: str, **variables: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    env |= {"DJANGO_SETTINGS_MODULE": "backend.settings", "TRAINYARD_VAR_DIR": str(tmp_path)}
    env |= variables
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(host=host)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_portal_served_by_name_sends_hsts_a_csp_and_secure_cookies(tmp_path):
    answer = served(
        tmp_path, "trainyard.example.org", TRAINYARD_ALLOWED_HOSTS="trainyard.example.org"
    )

    assert answer["hsts"] == "max-age=31536000"
    assert answer["secure_cookie"] is True
    csp = answer["csp"]
    for directive in ("default-src 'self'", "script-src 'self'", "frame-ancestors 'none'",
                      "object-src 'none'"):  # fmt: skip
        assert directive in csp
    # The API's docs page runs under the same policy: it has no inline script to be refused.
    assert answer["docs_status"] == 200 and answer["docs_csp"] == csp
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", answer["docs"]) == []


def test_on_localhost_nothing_forces_https(tmp_path):
    answer = served(tmp_path, "localhost")

    assert (answer["hsts"], answer["csp"], answer["secure_cookie"]) == (None, None, False)


def test_each_can_be_set_apart_from_the_host(tmp_path):
    answer = served(
        tmp_path, "trainyard.example.org",
        TRAINYARD_ALLOWED_HOSTS="trainyard.example.org", TRAINYARD_CSP="false",
        TRAINYARD_HSTS_SECONDS="600", TRAINYARD_SECURE_COOKIES="no",
    )  # fmt: skip

    assert (answer["hsts"], answer["csp"], answer["secure_cookie"]) == ("max-age=600", None, False)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_local_names_count_as_local(tmp_path, host):
    answer = served(tmp_path, host, TRAINYARD_ALLOWED_HOSTS="localhost,127.0.0.1,[::1]")

    assert answer["csp"] is None
