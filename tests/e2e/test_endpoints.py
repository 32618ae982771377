"""A real Jupyter server, started as a job on the local backend (as its owner's account),
opened in Debian's Chromium through the gateway's endpoint proxy (/endpoints/<job>/jupyter/):
the page loads and a kernel evaluates 1+1 over its WebSocket; another signed-in user gets
404."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest
import requests
from django.test import Client

from backend.jobs.models import JobStatus
from tests.backend.gateway_support import running_gateway
from tests.backend.local_support import NODES, JobManager, local_backend, log_of, submit
from tests.e2e.dashboard import chromium
from tests.polling import wait_until
from tests.servers import free_port
from tests.unix_accounts import JOB_PYTHON, JOB_PYTHONPATH, job_account

pytest.importorskip("jupyter_server")
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

KERNEL_SAYS = """
async (base) => {
  const started = await fetch(base + "api/kernels", {method: "POST", body: "{}",
                                headers: {"Content-Type": "application/json"}});
  if (!started.ok) return "kernel start: " + started.status;
  const kernel = await started.json();
  const url = base.replace(/^http/, "ws") + "api/kernels/" + kernel.id + "/channels";
  return await new Promise((resolve) => {
    const socket = new WebSocket(url);
    const id = "trainyard-" + Math.random();
    socket.onerror = () => resolve("websocket error");
    socket.onopen = () => socket.send(JSON.stringify({
      header: {msg_id: id, msg_type: "execute_request", username: "", session: id,
               version: "5.3", date: new Date().toISOString()},
      parent_header: {}, metadata: {}, channel: "shell", buffers: [],
      content: {code: "1+1", silent: false, store_history: false, user_expressions: {},
                allow_stdin: false, stop_on_error: true},
    }));
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.msg_type === "execute_result" && message.parent_header.msg_id === id) {
        resolve(message.content.data["text/plain"]);
      }
    };
  });
}
"""


@pytest.fixture
def backend(host_tmp, settings):
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    backend = local_backend(host_tmp)
    yield backend
    for job_id in backend.reports():
        backend.remove(job_id)


@pytest.fixture
def gateway(host_tmp, backend) -> Iterator:
    port = free_port()
    with running_gateway(host_tmp, NODES, TRAINYARD_ENDPOINTS_PORT=str(port)) as gateway:
        gateway.endpoints = f"http://127.0.0.1:{port}"
        yield gateway


def signed_in(user) -> str:
    """A portal session of ``user``'s (its cookie's value), as the sign-in page makes it."""
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def test_jupyter_opens_through_the_endpoint_proxy_for_its_owner_only(
    world, backend, redis_namespace, gateway
):
    endpoints = gateway.endpoints
    job_account(world.member.username)
    port = free_port()
    command = (
        'JUPYTER_TOKEN="$TRAINYARD_ENDPOINT_TOKEN" '
        f"{shlex.quote(JOB_PYTHON)} -m jupyter_server --no-browser --ip=127.0.0.1 --port={port}"
        ' --ServerApp.base_url="${TRAINYARD_ENDPOINTS_PATH}jupyter/"'
        " --ServerApp.root_dir=."
    )
    env = {"PYTHONPATH": JOB_PYTHONPATH, "JUPYTER_PLATFORM_DIRS": "1"}
    job = submit(world, command=command, env=env, ports=[{"name": "jupyter", "port": port}])
    job = JobManager(backend).run_until(job, JobStatus.RUNNING)
    base = f"{endpoints}/endpoints/{job.job_id}/jupyter/"
    mia, otto = signed_in(world.member), signed_in(world.outsider)

    def answers() -> bool:
        try:
            return requests.get(f"{base}api/status", cookies={"sessionid": mia}, timeout=5).ok
        except requests.RequestException:
            return False

    try:
        wait_until(answers, 20, "Jupyter to answer through the proxy")
    except BaseException:
        print(log_of(job), gateway.output())
        raise
    assert requests.get(f"{base}api/status", timeout=5).status_code == 404  # signed out
    # The job's server is not open to the host: without the proxy's token, refused (bare
    # processes); in its sandbox, on the job's own 127.0.0.1, not even reachable.
    direct = f"http://127.0.0.1:{port}{base[len(endpoints) :]}api/kernels"
    try:
        directly: int | None = requests.get(direct, timeout=5).status_code
    except requests.ConnectionError:
        directly = None
    assert directly == (None if backend.sandbox else 403)

    with chromium() as browser:
        owner = browser.new_context()
        owner.add_cookies([{"name": "sessionid", "value": mia, "url": endpoints}])
        page = owner.new_page()
        landing = page.goto(base)  # Jupyter's own page, through the proxy
        assert landing.status == 200, gateway.output()
        assert "jupyter" in page.content().lower()
        assert page.evaluate(KERNEL_SAYS, base) == "2"  # a kernel, over its WebSocket

        other = browser.new_context()
        other.add_cookies([{"name": "sessionid", "value": otto, "url": endpoints}])
        assert other.new_page().goto(f"{base}api").status == 404
