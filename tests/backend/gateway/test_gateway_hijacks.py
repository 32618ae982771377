"""The attacks of issue 29 on the SSH gateway and the endpoint proxy, replayed for real:
jobs on the local backend run as two tenants' accounts (mia and vera, ty-test-*), a real
``python -m backend.gateway`` (root) in front of them, Debian's OpenSSH client. The jobs
are bare processes (``TRAINYARD_LOCAL_SANDBOX=none``), which share the host's loopback and
process table: what these attacks need. With the sandbox (the default as root) each job
has a network namespace and a pid namespace of its own: test_gateway_sandbox.

- a preset's token on a command line, read by another tenant's job from /proc;
- a connection the proxy pooled to vera's server carrying mia's requests after mia's
  server took the port over;
- mia's server on ::1, vera's on 127.0.0.1 with the same port: the proxy must reach mia's;
- ``ssh -W``/``-L`` to a port of the portal's (the gateway's own endpoint proxy) that a
  process of the job also listens on, at the other address.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from backend.jobs.endpoint_tokens import endpoint_token
from backend.jobs.models import Job, JobStatus
from jobmanager.backends.local import LocalBackend
from tests.backend.gateway import test_ssh_gateway
from tests.backend.gateway_support import (
    registered_key,
    running_gateway,
    ssh,
    ssh_argv,
    tunnel_to,
)
from tests.backend.local_support import NODES, JobManager, local_backend, log_of, script, submit
from tests.e2e.test_endpoints import signed_in
from tests.polling import wait_until
from tests.servers import ROOT, free_port
from tests.unix_accounts import JOB_PYTHON, JOB_PYTHONPATH, job_account, reachable_directory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

PRESETS = ROOT / "frontend/src/pages/jobPresets.json"
# The SSH gateway's tests' job manager, over bare processes.
jobs = test_ssh_gateway.jobs

# A server that answers every GET with its name, keeping connections alive (HTTP/1.1) so
# that the proxy may pool them. Modes: "serve" (until killed); "retry" (binds as soon as
# the port is free, then serves); "once" (accepts one connection, closes its listening
# socket, then serves that connection as long as the client keeps it).
NAMED_SERVER = r"""
import http.server, socket, socketserver, sys, time

name, address, port, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

class Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = name.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
    daemon_threads = True

server = Server((address, port), Answer, bind_and_activate=False)
while True:
    try:
        server.server_bind()
        server.server_activate()
        break
    except OSError:
        if mode != "retry":
            raise
        time.sleep(0.05)
print("listening", flush=True)
while mode == "greet":  # says its name and hangs up before the client has said anything
    connection, client = server.get_request()
    connection.sendall(name.encode() + b"\n")
    connection.close()
if mode == "once":
    connection, client = server.get_request()
    server.socket.close()
    Answer(connection, client, server)
else:
    server.serve_forever()
"""

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
def backend(host_tmp, settings) -> Iterator[LocalBackend]:
    """The local backend running bare processes."""
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    backend = local_backend(host_tmp, sandbox="none")
    yield backend
    for job_id in backend.reports():
        backend.remove(job_id)


@pytest.fixture
def gateway(host_tmp, backend) -> Iterator:
    port = free_port()
    with running_gateway(
        host_tmp, NODES, TRAINYARD_ENDPOINTS_PORT=str(port), TRAINYARD_LOCAL_SANDBOX="none"
    ) as gateway:
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


def named_server(scripts: Path, name: str, address: str, port: int, mode: str = "serve") -> str:
    server = script(scripts, "named_server.py", NAMED_SERVER)
    return f"exec {server} {name} {address} {port} {mode}"


def running(world, jobs: JobManager, user, command: str, **spec) -> Job:
    return jobs.run_until(submit(world, user=user, command=command, **spec), JobStatus.RUNNING)


def accepting(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((address, port)) == 0


def through_proxy(gateway, job: Job, name: str, cookie: str) -> requests.Response | None:
    """The answer through the endpoint proxy; None while it cannot connect at all."""
    url = f"http://127.0.0.1:{gateway.endpoints_port}/endpoints/{job.job_id}/{name}/"
    try:
        return requests.get(url, cookies={"sessionid": cookie}, timeout=5)
    except requests.RequestException:
        return None


def answered(gateway, job: Job, name: str, cookie: str) -> requests.Response:
    last: list[requests.Response | None] = [None]

    def ok() -> requests.Response | None:
        last[0] = answer = through_proxy(gateway, job, name, cookie)
        return answer if answer is not None and answer.ok else None

    try:
        return wait_until(ok, 20, f"{name} of job {job.job_id} to answer through the proxy")
    except BaseException:
        answer = last[0]
        said = "no answer" if answer is None else f"{answer.status_code}: {answer.text[:300]}"
        job.refresh_from_db()
        print(
            f"the proxy's last answer: {said}; job {job.job_id} {job.status}, attempt "
            f"{job.attempt}; its log: {log_of(job)!r}; the gateway's: {gateway.output()}"
        )
        raise


# --- tokens on command lines ----------------------------------------------------------------


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


# --- the endpoint proxy -----------------------------------------------------------------------


def test_a_connection_pooled_to_one_tenant_s_server_never_carries_another_s_requests(
    world, tenants, jobs, gateway, scripts
):
    mia, vera = tenants
    port = free_port()
    exposed = [{"name": "web", "port": port}]
    # vera's server closes its listening socket once the proxy has connected, and keeps
    # that connection; mia's takes the port as soon as it is free.
    veras = running(
        world, jobs, vera, named_server(scripts, "vera", "127.0.0.1", port, "once"), ports=exposed
    )
    mias = running(
        world, jobs, mia, named_server(scripts, "mia", "127.0.0.1", port, "retry"), ports=exposed
    )

    assert answered(gateway, veras, "web", signed_in(vera)).text == "vera"
    wait_until(lambda: "listening" in log_of(mias), 20, "mia's server to take the port")

    assert answered(gateway, mias, "web", signed_in(mia)).text == "mia"


def test_the_proxy_reaches_the_job_s_server_on_1_not_another_s_on_127_0_0_1(
    world, tenants, jobs, gateway, scripts
):
    mia, vera = tenants
    port = free_port()
    running(world, jobs, vera, named_server(scripts, "vera", "127.0.0.1", port))
    mias = running(
        world,
        jobs,
        mia,
        named_server(scripts, "mia", "::1", port),
        ports=[{"name": "web", "port": port}],
    )
    wait_until(lambda: accepting("127.0.0.1", port) and accepting("::1", port), 20, "both servers")

    assert answered(gateway, mias, "web", signed_in(mia)).text == "mia"


def test_the_proxy_says_why_when_the_port_is_not_the_job_s(world, tenants, jobs, gateway, scripts):
    mia, vera = tenants
    port = free_port()
    running(world, jobs, vera, named_server(scripts, "vera", "127.0.0.1", port))
    mias = running(world, jobs, mia, "sleep 600", ports=[{"name": "web", "port": port}])
    wait_until(lambda: accepting("127.0.0.1", port), 20, "vera's server")

    answer = through_proxy(gateway, mias, "web", signed_in(mia))

    assert answer is not None and answer.status_code == 502
    assert answer.text == (
        f"port {port} at 127.0.0.1 is not job {mias.job_id}'s: a process that is not the "
        "job's listens there."
    )


# --- ssh -W and -L ------------------------------------------------------------------------------


def test_ssh_forwards_reach_the_job_s_own_port_never_the_portal_s(
    world, tenants, jobs, gateway, scripts, host_tmp
):
    mia, _ = tenants
    key = registered_key(host_tmp, mia)
    portal_port = gateway.endpoints_port  # the gateway's endpoint proxy, root's, on 127.0.0.1
    job = running(world, jobs, mia, named_server(scripts, "mia", "::1", portal_port))
    wait_until(lambda: accepting("::1", portal_port), 20, "the job's server on ::1")
    login = f"{mia.username}+{job.job_id}"
    request = "GET / HTTP/1.0\r\n\r\n"

    to_portal = ssh(gateway, key, login, "-W", f"127.0.0.1:{portal_port}", input=request)
    to_job = ssh(gateway, key, login, "-W", f"[::1]:{portal_port}", input=request)
    by_name = ssh(gateway, key, login, "-W", f"localhost:{portal_port}", input=request)

    assert to_portal.returncode == 255 and "HTTP/" not in to_portal.stdout
    assert f"port {portal_port} at 127.0.0.1 is not job {job.job_id}'s" in to_portal.stderr
    assert to_job.stdout.endswith("\n\nmia"), to_job.stderr + gateway.output()
    assert by_name.stdout.endswith("\n\nmia"), by_name.stderr

    def through_tunnel() -> str:
        try:
            return requests.get(f"http://127.0.0.1:{local_port}/", timeout=2).text
        except requests.RequestException:
            return ""

    with tunnel_to(gateway, key, login, f"localhost:{portal_port}") as local_port:
        assert wait_until(through_tunnel, 20, "the job's server through ssh -L") == "mia"


def test_ssh_w_ends_when_the_client_ends_after_the_job_s_server_did(
    world, tenants, jobs, gateway, scripts, host_tmp
):
    # The order that hung under load: the server answers and hangs up before the client's
    # EOF reaches the gateway. Here the client ends its side only once it has the answer.
    mia, _ = tenants
    key = registered_key(host_tmp, mia)
    port = free_port()
    job = running(world, jobs, mia, named_server(scripts, "mia", "127.0.0.1", port, "greet"))
    wait_until(lambda: "listening" in log_of(job), 20, "the job's server")
    argv = ssh_argv(gateway, key, f"{mia.username}+{job.job_id}", "-W", f"127.0.0.1:{port}")
    client = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert client.stdout.read() == b"mia\n"  # up to the server's EOF
        client.stdin.close()  # the client's EOF, last
        assert client.wait(timeout=15) == 0, client.stderr.read()
    finally:
        client.kill()
