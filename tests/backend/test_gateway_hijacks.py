"""An attack of issue 29, replayed for real: a job of one tenant (vera, ty-test-vera) lists
every process's command line on the host while another's (mia's) Jupyter preset runs,
opened through a real ``python -m backend.gateway``; the preset's token is not among them.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from backend.gateway.tokens import endpoint_token
from backend.jobs.models import Job, JobStatus
from tests.backend import test_ssh_gateway
from tests.backend.gateway_support import running_gateway
from tests.backend.test_local_backend_e2e import (
    NODES,
    JobManager,
    log_of,
    script,
    submit,
)
from tests.e2e.test_endpoints import signed_in
from tests.jobmanager.test_local_backend import wait_for
from tests.servers import ROOT, free_port
from tests.unix_accounts import JOB_PYTHON, JOB_PYTHONPATH, job_account, reachable_directory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

PRESETS = ROOT / "frontend/src/pages/jobPresets.json"
# The SSH gateway's tests' fixtures: the local backend and its job manager.
backend, jobs = test_ssh_gateway.backend, test_ssh_gateway.jobs

# What `ps -ef` prints: every process's command line, from /proc.
EVERY_COMMAND_LINE = r"""
import glob
for path in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        print(open(path, "rb").read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError:
        pass
print("listed", flush=True)
"""


@pytest.fixture
def gateway(host_tmp, backend) -> Iterator:
    port = free_port()
    with running_gateway(host_tmp, NODES, TRAINYARD_ENDPOINTS_PORT=str(port)) as gateway:
        gateway.endpoints_port = port
        yield gateway


@pytest.fixture
def scripts() -> Iterator[Path]:
    with reachable_directory() as directory:
        yield directory


@pytest.fixture
def tenants(world):
    """mia and vera, two members of the VC "vision", each with an account of this host."""
    job_account(world.member.username)
    job_account(world.vc_admin.username)
    return world.member, world.vc_admin


def running(world, jobs: JobManager, user, command: str, **spec) -> Job:
    return jobs.run_until(submit(world, user=user, command=command, **spec), JobStatus.RUNNING)


def through_proxy(gateway, job: Job, name: str, cookie: str) -> requests.Response | None:
    """The answer through the endpoint proxy; None while it cannot connect at all."""
    url = f"http://127.0.0.1:{gateway.endpoints_port}/endpoints/{job.job_id}/{name}/"
    try:
        return requests.get(url, cookies={"sessionid": cookie}, timeout=5)
    except requests.RequestException:
        return None


def answered(gateway, job: Job, name: str, cookie: str) -> requests.Response:
    def ok() -> requests.Response | None:
        answer = through_proxy(gateway, job, name, cookie)
        return answer if answer is not None and answer.ok else None

    try:
        return wait_for(ok, f"{name} of job {job.job_id} to answer through the proxy")
    except BaseException:
        print(log_of(job), gateway.output())
        raise


def jupyter_preset(port: int) -> tuple[str, str]:
    """The form's Jupyter preset (its command and ports) on ``port``, run with the
    suite's jupyter_server (no JupyterLab here: ``jupyter lab`` is the same server with
    the Lab's pages)."""
    preset = next(p for p in json.loads(PRESETS.read_text()) if p["name"] == "jupyter")
    server = f"{shlex.quote(JOB_PYTHON)} -m jupyter_server"
    command = preset["command"].replace("jupyter lab", server).replace("8888", str(port))
    return command, preset["ports"].replace("8888", str(port))


def test_no_process_of_the_host_shows_the_jupyter_preset_s_token(
    world, tenants, jobs, gateway, scripts
):
    pytest.importorskip("jupyter_server")
    mia, vera = tenants
    port = free_port()
    command, ports = jupyter_preset(port)
    assert "TRAINYARD_ENDPOINT_TOKEN" in command and ports == f"jupyter={port}"
    env = {"PYTHONPATH": JOB_PYTHONPATH, "JUPYTER_PLATFORM_DIRS": "1"}
    notebook = running(
        world, jobs, mia, command, env=env, ports=[{"name": "jupyter", "port": port}]
    )
    # The proxy gets in with the job's token: Jupyter was given it.
    answered(gateway, notebook, "jupyter", signed_in(mia))
    direct = f"http://127.0.0.1:{port}/endpoints/{notebook.job_id}/jupyter/api/kernels"
    assert requests.get(direct, timeout=5).status_code == 403  # and no one without it
    token = endpoint_token(notebook.job_id)

    # What `ps -ef` shows vera's job: every process's command line on the host.
    ps = submit(world, user=vera, command=script(scripts, "ps.py", EVERY_COMMAND_LINE))
    jobs.run_until(ps, JobStatus.FINISHED)
    listing = log_of(ps)

    assert "listed" in listing and "jupyter_server" in listing  # it saw mia's server
    assert token not in listing
