"""The SSH gateway and the endpoint proxy into workers of Slurm jobs on other nodes of a
real cluster (three slurmd in network namespaces), with Debian's OpenSSH client: a
command, a terminal, scp and sftp run on the worker's node as the job's owner; ``-L`` and
``-W`` reach the job's own server on its node's loopback and nothing else there; a
session ends with the job."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator

import pytest
import requests
from aiohttp import web
from django.test import Client

from backend.accounts.host_key import load_host_key
from backend.gateway.__main__ import configured_target
from backend.gateway.endpoints import EndpointProxy
from backend.gateway.ports import NotTheJobs
from backend.gateway.server import start_server
from backend.gateway.slurm import SlurmTarget
from backend.jobs.endpoint_tokens import endpoint_env
from backend.jobs.models import Job, JobStatus
from jobmanager.backends import JobLaunch, RunAs, WorkerSpec
from jobmanager.backends.slurm import SlurmBackend
from tests.backend.gateway_support import (
    Gateway,
    on_terminal,
    registered_key,
    ssh,
    ssh_argv,
    tunnel_to,
)
from tests.backend.jobs_support import make_job
from tests.polling import wait_until
from tests.servers import free_port
from tests.unix_accounts import JOB_PYTHON, job_account, require_root

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
SECONDS = 60.0


@pytest.fixture
def backend(slurm_cluster, host_tmp) -> Iterator[SlurmBackend]:
    require_root()
    backend = SlurmBackend(host_tmp / "state", host_tmp / "logs", str(slurm_cluster.conf))
    try:
        yield backend
    finally:
        for job_id in backend.reports():
            backend.stop(job_id, 0)
            backend.remove(job_id)


@pytest.fixture
def served(backend, settings) -> Iterator[tuple[Gateway, int]]:
    """The gateway's SSH server and endpoint proxy in this process (on an event loop of
    their own), entering the Slurm backend's workers; the proxy's port."""
    settings.TRAINYARD_SSH_JOB_CHECK_SECONDS = 0.2
    directory = backend.state_dir.parent
    key = load_host_key(directory / "host_key")
    port, proxy_port = free_port(), free_port()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    target = SlurmTarget(backend)

    async def serve():
        server = await start_server(target, "127.0.0.1", port, key)
        runner = web.AppRunner(EndpointProxy(target).app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", proxy_port).start()
        return server, runner

    server, runner = asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=10)
    gateway = Gateway(None, port, directory / "gateway.log", directory)
    public = key.export_public_key().decode().split()
    gateway.known_hosts.write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
    yield gateway, proxy_port
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(server.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


@pytest.fixture
def owner(world) -> RunAs:
    return job_account(world.member.username)


def test_the_gateway_s_target_for_trainyard_backend_slurm_enters_its_jobs(settings, tmp_path):
    settings.TRAINYARD_BACKEND = "slurm"
    settings.TRAINYARD_SLURM_STATE_DIR = tmp_path / "state"
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"

    target = configured_target()

    assert isinstance(target, SlurmTarget) and target.unreachable == ""


def slurm_job(
    world, backend: SlurmBackend, owner: RunAs, command: str, gpus=(1, 1), **fields
) -> Job:
    """A running job of the member's with two workers, on node1 and node2 of Slurm, with
    ``gpus`` each (when they differ, a heterogeneous Slurm job)."""
    job = make_job(world, status=JobStatus.RUNNING, attempt=1, workers=2, **fields)
    workers = tuple(
        WorkerSpec(rank, f"node{rank + 1}", tuple(range(gpus[rank])), 1000, 64) for rank in (0, 1)
    )
    launch = JobLaunch(
        job_id=job.job_id, attempt=1, name="gateway", owner=owner.name, vc="vision",
        command=command, run_as=owner, env=endpoint_env(job.job_id), workers=workers,
    )  # fmt: skip
    backend.deploy(launch)
    for rank in (0, 1):
        wait_until(
            lambda rank=rank: backend.worker_step(job.job_id, rank), SECONDS, "a worker runs"
        )
    return job


def login(job: Job, rank: int = 0) -> str:
    return f"{job.owner.username}+{job.job_id}" + (f".{rank}" if rank else "")


def test_a_command_runs_on_the_worker_s_node_as_its_owner_with_its_exit_status(
    world, backend, served, owner, host_tmp
):
    gateway, _ = served
    key = registered_key(host_tmp, world.member)
    job = slurm_job(world, backend, owner, "exec sleep 600")

    result = ssh(gateway, key, login(job, 1), 'echo "$(hostname) $(id -un) $RANK"; exit 4')
    first = ssh(gateway, key, login(job), "hostname; echo on-stderr >&2")

    assert (result.returncode, result.stdout) == (4, f"node2 {owner.name} 1\n"), result.stderr
    assert (first.returncode, first.stdout, first.stderr) == (0, "node1\n", "on-stderr\n")


def test_a_terminal_session_on_the_worker_s_node_gets_a_tty_of_the_client_s_size(
    world, backend, served, owner, host_tmp
):
    gateway, _ = served
    key = registered_key(host_tmp, world.member)
    job = slurm_job(world, backend, owner, "exec sleep 600")
    argv = ssh_argv(gateway, key, login(job, 1), "-tt")

    code, shown = on_terminal([*argv, "stty size; tty; hostname"])

    # Only what the command printed (the NUL echoed as ^@ seen here came from the terminal
    # `script` gave ssh, not from srun).
    lines = shown.split("\n")
    assert code == 0, shown
    assert lines[:1] == ["24 80"] and lines[2:3] == ["node2"], lines  # a 0x0 client: 80x24
    assert lines[1].startswith("/dev/pts/"), lines


@pytest.mark.parametrize("protocol", ["sftp", "legacy scp"])
def test_scp_and_sftp_copy_to_and_from_the_worker_s_node_as_its_owner(
    world, backend, served, owner, host_tmp, protocol
):
    gateway, _ = served
    key = registered_key(host_tmp, world.member)
    job = slurm_job(world, backend, owner, "exec sleep 600")
    upload = host_tmp / "weights.bin"
    upload.write_bytes(os.urandom(1024 * 1024 + 17))
    remote = f"{login(job, 1)}@127.0.0.1"
    legacy = ["-O"] if protocol == "legacy scp" else []  # scp -t run as a command

    up = subprocess.run(
        ssh_argv(gateway, key, "", *legacy, str(upload), f"{remote}:weights.bin", program="scp"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    uploaded = backend.state_dir / job.job_id / "work" / "weights.bin"  # the working dir
    assert uploaded.read_bytes() == upload.read_bytes()
    assert (uploaded.stat().st_uid, uploaded.stat().st_gid) == (owner.uid, owner.gid)

    ssh(gateway, key, login(job, 1), "hostname > where.txt")
    batch = host_tmp / "batch"
    batch.write_text(f"get where.txt {host_tmp / 'where.txt'}\nls\n")
    listed = subprocess.run(
        ssh_argv(gateway, key, "", "-b", str(batch), remote, program="sftp"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "weights.bin" in listed.stdout
    assert (host_tmp / "where.txt").read_text() == "node2\n"


def test_ssh_l_reaches_the_job_s_server_on_its_node_s_loopback_and_nothing_else_there(
    world, backend, served, owner, host_tmp, slurm_cluster
):
    gateway, _ = served
    key = registered_key(host_tmp, world.member)
    port = free_port()
    server = f"exec {JOB_PYTHON} -m http.server --bind 127.0.0.1 {port}"
    job = slurm_job(world, backend, owner, server)

    with tunnel_to(gateway, key, login(job, 1), f"localhost:{port}") as local_port:

        def answered() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{local_port}/", timeout=5).ok
            except requests.RequestException:
                return False

        wait_until(answered, SECONDS, "the job's server through ssh -L")

    # slurmd listens on the node too (root's): -W to it is refused, saying why.
    refused = ssh(
        gateway, key, login(job, 1), "-W", f"localhost:{slurm_cluster.node_port}", input=""
    )
    assert refused.returncode != 0
    assert f"port {slurm_cluster.node_port} at 127.0.0.1 is not job" in refused.stderr


def test_the_endpoint_proxy_reaches_a_server_on_rank_0_s_node(
    world, backend, served, owner, host_tmp
):
    _, proxy_port = served
    port = free_port()
    # Rank 0 checks the token the proxy sends, as the Jupyter preset makes Jupyter do.
    server = host_tmp / "token_server.py"
    server.write_text(TOKEN_SERVER)
    server.chmod(0o644)
    job = slurm_job(
        world, backend, owner, f"exec {JOB_PYTHON} {server} {port}",
        ports=[{"name": "notebook", "port": port}],
    )  # fmt: skip
    client = Client()
    client.force_login(world.member)
    cookie = client.cookies["sessionid"].value
    url = f"http://127.0.0.1:{proxy_port}/endpoints/{job.job_id}/notebook/hello"

    def answer() -> requests.Response | None:
        try:
            response = requests.get(url, cookies={"sessionid": cookie}, timeout=10)
        except requests.RequestException:
            return None
        return response if response.status_code != 502 else None

    wait_until(answer, SECONDS, "the proxy to reach rank 0's server")
    response = answer()
    assert response is not None and response.status_code == 200, response and response.text
    assert response.text == f"node1 /endpoints/{job.job_id}/notebook/hello\n"


TOKEN_SERVER = """\
import http.server, os, socket, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        expected = "token " + os.environ["TRAINYARD_ENDPOINT_TOKEN"]
        ok = self.headers.get("Authorization") == expected
        body = f"{socket.gethostname()} {self.path}\\n".encode() if ok else b"no\\n"
        self.send_response(200 if ok else 403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_session_ends_when_the_job_ends(world, backend, served, owner, host_tmp):
    gateway, _ = served
    key = registered_key(host_tmp, world.member)
    job = slurm_job(world, backend, owner, "exec sleep 600")
    session = subprocess.Popen(
        ssh_argv(gateway, key, login(job, 1), "echo in; exec sleep 600"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert session.stdout is not None and session.stdout.readline() == "in\n"
        # As a kill does: the job leaves running, then the backend stops it.
        Job.objects.filter(pk=job.pk).update(status=JobStatus.KILLING)
        backend.stop(job.job_id, 0)
        _, stderr = session.communicate(timeout=SECONDS)
    finally:
        session.kill()
    assert session.returncode == 255
    assert f"job {job.job_id} has ended" in stderr


def test_a_worker_of_a_heterogeneous_job_is_entered_on_its_own_component(
    world, backend, served, owner, host_tmp
):
    gateway, _ = served
    key = registered_key(host_tmp, world.member)
    port = free_port()
    server = f"exec {JOB_PYTHON} -m http.server --bind 127.0.0.1 {port}"
    job = slurm_job(world, backend, owner, server, gpus=(2, 1))  # the shares differ

    result = ssh(gateway, key, login(job, 1), 'echo "$(hostname) $RANK"')

    assert (result.returncode, result.stdout) == (0, "node2 1\n"), result.stderr
    target = SlurmTarget(backend)  # and its relay finds the component's processes

    def listening() -> bool:
        try:
            return target.listener(job.job_id, "localhost", port, 1).port == port
        except NotTheJobs:
            return False

    wait_until(listening, SECONDS, "worker 1's server, through the relay")


def test_a_command_s_processes_end_when_the_client_hangs_up(
    world, backend, served, owner, host_tmp, slurm_cluster
):
    gateway, _ = served
    key = registered_key(host_tmp, world.member)
    job = slurm_job(world, backend, owner, "exec sleep 600")
    marker = f"hangup-{job.job_id}"
    session = subprocess.Popen(
        ssh_argv(gateway, key, login(job, 1), f"echo in; exec -a {marker} sleep 600"),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert session.stdout is not None and session.stdout.readline() == "in\n"
        assert _running(slurm_cluster, "node2", marker)
    finally:
        session.kill()
        session.wait()

    wait_until(lambda: not _running(slurm_cluster, "node2", marker), SECONDS, "its end")
    assert backend.worker_step(job.job_id, 1) is not None  # the job itself runs on


def _running(cluster, node: str, name: str) -> bool:
    """Whether a process called ``name`` runs in the node's network namespace."""
    pids = subprocess.run(
        ["ip", "netns", "pids", cluster.namespace(node)], capture_output=True, text=True
    ).stdout.split()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if cmdline.read().split(b"\0")[0].decode() == name:
                    return True
        except OSError:
            continue
    return False
