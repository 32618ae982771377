"""The SSH gateway into job pods on Kubernetes, through the fake API server's exec and
port-forward WebSockets (tests/k8s_fake/streams.py), with Debian's OpenSSH client."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Iterator

import pytest
import requests
from kubernetes import client

from backend.accounts.host_key import load_host_key
from backend.gateway.kubernetes import KubernetesTarget
from backend.gateway.server import start_server
from backend.jobs.models import Job, JobStatus
from jobmanager.backends.k8s_manifests import pod_name
from tests.backend.gateway_support import (
    Gateway,
    listening,
    on_terminal,
    registered_key,
    ssh,
    ssh_argv,
)
from tests.backend.jobs_support import make_job
from tests.polling import wait_until
from tests.servers import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

pytest_plugins = ["tests.k8s_fake"]
NAMESPACE = "trainyard-jobs"


@pytest.fixture
def k8s_gateway(fake_kubernetes, host_tmp, settings) -> Iterator[Gateway]:
    """The gateway's server in this process (on an event loop of its own), entering pods
    of the fake API server."""
    settings.TRAINYARD_SSH_JOB_CHECK_SECONDS = 0.2
    api_client = fake_kubernetes.api_client()
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": NAMESPACE}})
    key = load_host_key(host_tmp / "host_key")
    port = free_port()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    target = KubernetesTarget(api_client, NAMESPACE)
    server = asyncio.run_coroutine_threadsafe(
        start_server(target, "127.0.0.1", port, key), loop
    ).result(timeout=10)
    gateway = Gateway(None, port, host_tmp / "gateway.log", host_tmp)
    public = key.export_public_key().decode().split()
    gateway.known_hosts.write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
    yield gateway
    loop.call_soon_threadsafe(server.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    api_client.close()


def running_pod_job(world, fake_kubernetes, home, **fields) -> Job:
    job = make_job(world, status=JobStatus.RUNNING, attempt=1, **fields)
    core = client.CoreV1Api(fake_kubernetes.api_client())
    for rank in range(job.workers):
        env = [
            {"name": "TRAINYARD_JOB_ID", "value": job.job_id},
            {"name": "RANK", "value": str(rank)},
            {"name": "HOME", "value": str(home)},
        ]
        name = pod_name(job.job_id, 1, rank)
        core.create_namespaced_pod(
            NAMESPACE,
            {"metadata": {"name": name},
             "spec": {"containers": [{"name": "worker", "image": "busybox", "env": env}]}},
        )  # fmt: skip
        fake_kubernetes.set_pod_phase(NAMESPACE, name, "Running")
    return job


def login(job: Job, rank: int | None = None) -> str:
    return f"{job.owner.username}+{job.job_id}" + ("" if rank is None else f".{rank}")


def test_a_command_runs_in_the_job_s_pod_with_its_environment_and_exit_status(
    world, fake_kubernetes, k8s_gateway, host_tmp
):
    key = registered_key(host_tmp, world.member)
    job = running_pod_job(world, fake_kubernetes, host_tmp, workers=2)

    result = ssh(k8s_gateway, key, login(job), 'echo "$TRAINYARD_JOB_ID $RANK"; exit 4')
    second = ssh(k8s_gateway, key, login(job, 1), "echo $RANK; echo on-stderr >&2")

    assert (result.returncode, result.stdout) == (4, f"{job.job_id} 0\n"), result.stderr
    assert (second.returncode, second.stdout, second.stderr) == (0, "1\n", "on-stderr\n")
    exec_calls = [r for r in fake_kubernetes.requests if r.path.endswith("/exec")]
    assert exec_calls[0].path == f"/api/v1/namespaces/{NAMESPACE}/pods/ty-{job.job_id}-1-0/exec"


def test_a_session_outlives_an_api_server_that_does_not_answer_for_a_while(
    world, fake_kubernetes, k8s_gateway, host_tmp
):
    key = registered_key(host_tmp, world.member)
    job = running_pod_job(world, fake_kubernetes, host_tmp)
    session = subprocess.Popen(
        ssh_argv(k8s_gateway, key, login(job), "echo started; read line; echo got $line"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert session.stdout.readline() == "started\n"
        # Ten checks of the pod in a row answered 503, as an API server restarting would.
        fake_kubernetes.fail_reads("pods", 10)
        wait_until(
            lambda: fake_kubernetes.read_failures_left("pods") == 0 or session.poll() is not None,
            20,
            "ten failed checks of the pod",
        )
        out, err = session.communicate("on\n", timeout=60)
    finally:
        session.kill()
    assert (session.returncode, out) == (0, "got on\n"), err


def test_a_terminal_session_gets_a_tty_of_the_client_s_size(
    world, fake_kubernetes, k8s_gateway, host_tmp
):
    key = registered_key(host_tmp, world.member)
    job = running_pod_job(world, fake_kubernetes, host_tmp)
    argv = ssh_argv(k8s_gateway, key, login(job), "-tt", "-o", "SetEnv=LANG=C")
    # The exec API takes no size: it comes on the resize channel once the command runs, as
    # with kubectl, so a busy machine can run `stty size` first (0 0). Wait for it.
    sized = 'until [ "$(stty size)" != "0 0" ]; do sleep 0.05; done; stty size; tty'

    code, shown = on_terminal([*argv, sized])

    # Nothing but what the command printed: no byte the client did not type (a NUL, echoed
    # as ^@, once came from the terminal `script` gave ssh).
    lines = shown.split("\n")
    assert code == 0, shown
    assert lines[0] == "24 80", lines  # rows, columns: the resize channel
    assert lines[1].startswith("/dev/pts/"), lines


def test_ssh_w_gets_the_pod_s_answer_to_a_request_the_client_ended(
    world, fake_kubernetes, k8s_gateway, host_tmp
):
    key = registered_key(host_tmp, world.member)
    job = running_pod_job(world, fake_kubernetes, host_tmp)
    pod_port = free_port()
    server = subprocess.Popen(
        ["python3", "-m", "http.server", str(pod_port), "--bind", "127.0.0.1"],
        cwd=host_tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: listening(pod_port), 20, "the pod's server")
        # The request, then the client's EOF (its stdin ends) before the pod answers.
        answer = ssh(
            k8s_gateway, key, login(job), "-W", f"localhost:{pod_port}",
            input="GET / HTTP/1.0\r\n\r\n", timeout=30,
        )  # fmt: skip
    finally:
        server.kill()
    assert answer.stdout.startswith("HTTP/1.0 200"), answer.stderr


def test_ssh_l_reaches_a_port_of_the_pod_through_port_forward(
    world, fake_kubernetes, k8s_gateway, host_tmp
):
    key = registered_key(host_tmp, world.member)
    job = running_pod_job(world, fake_kubernetes, host_tmp)
    pod_port, local_port = free_port(), free_port()
    server = subprocess.Popen(
        ["python3", "-m", "http.server", str(pod_port), "--bind", "127.0.0.1"],
        cwd=host_tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    tunnel = subprocess.Popen(
        ssh_argv(k8s_gateway, key, login(job), "-N", "-L", f"{local_port}:localhost:{pod_port}")
    )

    def served() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{local_port}/", timeout=2).ok
        except requests.RequestException:
            return False

    try:
        wait_until(served, 20, "the pod's server through the gateway")
    finally:
        tunnel.terminate()
        server.terminate()
        tunnel.wait(timeout=10)
        server.wait(timeout=10)
    forwards = [r for r in fake_kubernetes.requests if r.path.endswith("/portforward")]
    assert forwards and forwards[0].query == {"ports": str(pod_port)}


def test_a_job_whose_pod_is_gone_is_refused(world, fake_kubernetes, k8s_gateway, host_tmp):
    key = registered_key(host_tmp, world.member)
    job = make_job(world, status=JobStatus.RUNNING, attempt=1)  # no pod

    result = ssh(k8s_gateway, key, login(job), "true")

    assert result.returncode == 1
    assert f"worker 0 of job {job.job_id} is not running" in result.stderr
