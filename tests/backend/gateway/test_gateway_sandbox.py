"""The SSH gateway's forwards and the endpoint proxy with every job in a runc container
(``TRAINYARD_LOCAL_SANDBOX=runc``): the real runtime, each job in a network namespace of
its own on a bridge and subnet of the test's own, a real ``python -m backend.gateway``
(root) in front, Debian's OpenSSH client. A job's ``127.0.0.1`` is its namespace's: the
gateway reaches it there, and nothing of the host's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from backend.jobs.models import JobStatus
from tests.backend.gateway.test_gateway_hijacks import (
    accepting,
    answered,
    jupyter_preset,
    named_server,
    running,
    through_proxy,
)
from tests.backend.gateway_support import registered_key, running_gateway, ssh, tunnel_to
from tests.backend.local_support import NODES, JobManager, log_of
from tests.e2e.test_endpoints import signed_in
from tests.jobmanager.test_local_sandbox import private_network, sandboxed_backend, sleepers
from tests.polling import wait_until
from tests.servers import free_port
from tests.unix_accounts import JOB_PYTHONPATH, REPOSITORY, job_account, reachable_directory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

REQUEST = "GET / HTTP/1.0\r\n\r\n"


@pytest.fixture
def scripts() -> Iterator:
    with reachable_directory() as directory:
        yield directory


@pytest.fixture
def network() -> Iterator[dict[str, object]]:
    with private_network() as claimed:
        yield claimed


@pytest.fixture
def backend(host_tmp, settings, scripts, network):
    """The local backend, every job in a runc container that sees the test's scripts."""
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    paths = [str(REPOSITORY), *JOB_PYTHONPATH.split(":"), str(scripts)]
    options = {"nodes": NODES, "sandbox_readonly_paths": paths} | network
    with sandboxed_backend(host_tmp, **options) as backend:
        yield backend


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


@pytest.fixture
def gateway(host_tmp, backend, network) -> Iterator:
    """The gateway over the sandboxed backend, with its endpoint proxy."""
    port = free_port()
    with running_gateway(
        host_tmp, NODES,
        TRAINYARD_ENDPOINTS_PORT=str(port),
        TRAINYARD_LOCAL_STATE_DIR=str(backend.state_dir),
        TRAINYARD_LOCAL_SANDBOX="runc",
        TRAINYARD_LOCAL_SANDBOX_BRIDGE=str(network["sandbox_bridge"]),
        TRAINYARD_LOCAL_SANDBOX_SUBNET=str(network["sandbox_subnet"]),
        TRAINYARD_LOCAL_SANDBOX_EGRESS_NAT="false",
    ) as gateway:  # fmt: skip
        gateway.endpoints_port = port
        yield gateway


@pytest.fixture
def tenants(world):
    """mia and vera, two members of the VC "vision", each with an account of this host."""
    job_account(world.member.username)
    job_account(world.vc_admin.username)
    return world.member, world.vc_admin


def test_ssh_l_reaches_the_server_a_sandboxed_job_runs_on_its_own_127_0_0_1(
    world, tenants, jobs, gateway, scripts, host_tmp
):
    port = free_port()  # free on the host, and in every job's namespace
    mia, _ = tenants
    job = running(world, jobs, mia, named_server(scripts, "mia", "127.0.0.1", port))
    login = f"{mia.username}+{job.job_id}"
    key = registered_key(host_tmp, mia)
    assert not accepting("127.0.0.1", port)  # not on the host's loopback

    with tunnel_to(gateway, key, login, f"localhost:{port}") as local_port:
        assert wait_until(lambda: _get(local_port), 20, "the job's server through ssh -L") == "mia"

    direct = ssh(gateway, key, login, "-W", f"127.0.0.1:{port}", input=REQUEST)
    assert direct.stdout.endswith("\n\nmia"), direct.stderr + gateway.output()


def test_ssh_w_to_a_port_of_the_portal_s_reaches_the_job_s_own_server_there_or_nothing(
    world, tenants, jobs, gateway, scripts, host_tmp
):
    mia, _ = tenants
    portal_port = gateway.endpoints_port  # root's, on the host's 127.0.0.1
    job = running(world, jobs, mia, named_server(scripts, "mia", "127.0.0.1", portal_port))
    login = f"{mia.username}+{job.job_id}"
    key = registered_key(host_tmp, mia)
    wait_until(lambda: "listening" in log_of(job), 20, "the job's server")

    gateway_s = ssh(gateway, key, login, "-W", f"localhost:{gateway.port}", input=REQUEST)
    # The portal's port number through a forward reaches the job's server there (-L here;
    # test_ssh_l_... shows -W reaching the job's server too).
    with tunnel_to(gateway, key, login, f"127.0.0.1:{portal_port}") as local_port:
        same_port = wait_until(
            lambda: _get(local_port), 20, "the job's server on the portal's port"
        )

    assert same_port == "mia", gateway.output()
    assert gateway_s.returncode == 255 and gateway_s.stdout == ""
    assert f"no process of job {job.job_id} listens on port {gateway.port}" in gateway_s.stderr


def test_the_proxy_reaches_each_sandboxed_job_s_own_server_never_another_s(
    world, tenants, jobs, gateway, scripts
):
    port = free_port()  # free on the host, and in every job's namespace
    mia, vera = tenants
    mias = running(
        world, jobs, mia, named_server(scripts, "mia", "127.0.0.1", port),
        ports=[{"name": "web", "port": port}],
    )  # fmt: skip
    veras = running(
        world, jobs, vera, named_server(scripts, "vera", "0.0.0.0", port),
        ports=[{"name": "web", "port": port}],
    )  # fmt: skip

    assert answered(gateway, mias, "web", signed_in(mia)).text == "mia"
    assert answered(gateway, veras, "web", signed_in(vera)).text == "vera"
    assert answered(gateway, mias, "web", signed_in(mia)).text == "mia"  # a pooled one
    stranger = through_proxy(gateway, veras, "web", signed_in(mia))
    assert stranger is not None and stranger.status_code == 404


def _get(port: int) -> str:
    try:
        return requests.get(f"http://127.0.0.1:{port}/", timeout=2).text
    except requests.RequestException:
        return ""


def test_the_proxy_reaches_the_jupyter_preset_in_a_sandboxed_job(world, tenants, jobs, gateway):
    pytest.importorskip("jupyter_server")
    mia, _ = tenants
    port = free_port()
    command, _ = jupyter_preset(port)  # on the job's 127.0.0.1 (its --ip)
    env = {"PYTHONPATH": JOB_PYTHONPATH, "JUPYTER_PLATFORM_DIRS": "1"}
    notebook = running(
        world, jobs, mia, command, env=env, ports=[{"name": "jupyter", "port": port}]
    )

    answered(gateway, notebook, "jupyter", signed_in(mia))
    kernels = f"/endpoints/{notebook.job_id}/jupyter/api/kernels"
    answer = requests.get(
        f"http://127.0.0.1:{gateway.endpoints_port}{kernels}",
        cookies={"sessionid": signed_in(mia)},
        timeout=10,
    )

    assert answer.status_code == 200 and answer.json() == []  # the job's token got in


def test_what_an_ssh_session_double_forks_dies_when_the_job_is_killed(
    world, tenants, jobs, gateway, host_tmp
):
    # Issue 29's escape: with bare processes, a sleep started like this over SSH (out of
    # the session, unmarked) still ran 22 minutes after its job was killed.
    mia, _ = tenants
    job = running(world, jobs, mia, "echo started; sleep 300")
    key = registered_key(host_tmp, mia)
    escape = "env -u TRAINYARD_LOCAL_WORKER setsid nohup sleep 8771 > /dev/null 2>&1 < /dev/null &"

    session = ssh(gateway, key, f"{mia.username}+{job.job_id}", escape)

    assert session.returncode == 0, session.stderr + gateway.output()
    wait_until(lambda: sleepers("8771"), 20, "the session's double-forked sleep")
    killed = world.client(mia).post(f"/api/v1/jobs/{job.job_id}/kill/", {})
    assert killed.status_code == 200, killed.content
    jobs.run_until(job, JobStatus.KILLED)
    wait_until(lambda: not sleepers("8771"), 20, "the double-forked sleep to die with the job")
