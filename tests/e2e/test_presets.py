"""The submit form's presets, each submitted and opened from its job page in headless
Chromium on a live system (gunicorn, Celery worker and beat, the SSH gateway with its
endpoint proxy; jobs as their owners on the local backend, in the shared training
environment): the interactive shell answers the SSH command the page shows, Jupyter's and
TensorBoard's own pages load through the page's links.

The training environment is built once per machine (the ``training_env`` fixture): a
minute or two the first time.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator

import pytest
import requests
from django.conf import settings
from playwright.sync_api import expect

from tests.backend.gateway_support import SSH_OPTIONS, registered_key, running_gateway
from tests.e2e import test_dashboard
from tests.e2e.dashboard import live_servers
from tests.polling import wait_until
from tests.servers import free_port
from tests.unix_accounts import job_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
NODES, WAIT_MS = test_dashboard.NODES, test_dashboard.WAIT_MS
# A server in the training environment takes seconds to start on loaded cores.
SERVER_SECONDS = 180
browser = test_dashboard.browser
screenshots = test_dashboard.screenshots
open_browser = test_dashboard.open_browser


@pytest.fixture
def gateway(host_tmp, training_env) -> Iterator:
    endpoints_port = free_port()
    with running_gateway(host_tmp, NODES, TRAINYARD_ENDPOINTS_PORT=str(endpoints_port)) as running:
        running.endpoints_url = f"http://127.0.0.1:{endpoints_port}"
        yield running


@pytest.fixture
def servers(world, host_tmp, redis_url, gateway):
    """The portal, telling users the gateway's address and its endpoint proxy's."""
    job_account(world.member.username)
    gateway_env = {
        "TRAINYARD_SECRET_KEY": settings.SECRET_KEY,  # the gateway's: it reads their sessions
        "TRAINYARD_SSH_GATEWAY": "127.0.0.1",
        "TRAINYARD_SSH_PORT": str(gateway.port),
        "TRAINYARD_ENDPOINTS_URL": gateway.endpoints_url,
    }
    with live_servers(host_tmp, redis_url, NODES, extra_env=gateway_env) as running:
        yield running


def submit_preset(window, label: str) -> None:
    """Submit the preset from the form, as it fills it in, and wait on its page until
    it runs."""
    page = window.page
    page.get_by_role("link", name="Submit job").first.click()
    expect(page.get_by_label("GPU type")).to_have_value("A100")  # the form has loaded
    page.get_by_role("button", name=label, exact=True).click()
    expect(page.get_by_text("Resources are free: this job can start now.")).to_be_visible()
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("h1 .badge")).to_have_text("running", timeout=WAIT_MS)


def test_the_interactive_shell_answers_the_ssh_command_its_page_shows(
    open_browser, world, gateway, host_tmp
):
    key = registered_key(host_tmp, world.member)
    window = open_browser()
    window.sign_in("mia")
    submit_preset(window, "Interactive shell")

    shown = window.page.get_by_label("Endpoints").locator("code").first
    expect(shown).to_contain_text("ssh -p")
    program, *destination = shlex.split(shown.inner_text())
    options = ["-i", str(key), *SSH_OPTIONS, "-o", f"UserKnownHostsFile={gateway.known_hosts}"]
    session = subprocess.run(
        [program, *options, *destination, "echo $USER in $PWD; python -c 'import torch'"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert session.returncode == 0, session.stderr + gateway.output()
    assert re.fullmatch(r"ty-test-mia in /\S+/work\n", session.stdout), session.stdout


@pytest.mark.parametrize(
    ("label", "name", "says"),
    [("Jupyter", "jupyter", "JupyterLab"), ("TensorBoard", "tensorboard", "TensorBoard")],
)
def test_a_server_preset_opens_from_its_job_page(open_browser, world, gateway, label, name, says):
    window = open_browser()
    window.sign_in("mia")
    submit_preset(window, label)
    link = window.page.get_by_role("link", name=f"Open {name}")
    expect(link).to_have_attribute("href", re.compile(f"^{gateway.endpoints_url}/endpoints/"))

    # The server starts after the job does: wait until it answers through the proxy,
    # with the browser's own session, as a user would reload the page.
    cookies = {c["name"]: c["value"] for c in window.context.cookies()}
    href = link.get_attribute("href")

    def answers() -> bool:
        try:
            return requests.get(href, cookies=cookies, timeout=10).status_code == 200
        except requests.RequestException:
            return False

    wait_until(answers, SERVER_SECONDS, f"{label} to answer at {href}")
    with window.context.expect_page() as opened:
        link.click()
    expect(opened.value).to_have_title(says)
    window.shot(f"preset-{name}")
