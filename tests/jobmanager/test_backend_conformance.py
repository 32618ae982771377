"""What every cluster backend promises, written once and run against each: local
processes, the Kubernetes fake API server, and a real Slurm cluster of three nodes in
network namespaces (tests/slurm_cluster.py). A backend-specific behaviour is tested in
that backend's own module; a behaviour a backend cannot show here (a fake runs no
command; the local host has no node to lose) is skipped for it, saying why."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobmanager.backends import ClusterBackend, WorkerState
from jobmanager.backends.base import NODE_UNHEALTHY, JobReport
from jobmanager.backends.kubernetes import KubernetesBackend
from jobmanager.backends.local import JOB_PATH, LocalBackend
from jobmanager.backends.slurm import SlurmBackend
from tests.jobmanager.conformance import Harness, Work
from tests.polling import wait_until
from tests.sandbox_network import shared_with_jobs
from tests.servers import free_port
from tests.slurm_cluster import wait_until_idle
from tests.unix_accounts import JOB_PYTHON, job_account, reachable_directory, require_root

pytest_plugins = ["tests.k8s_fake"]

BACKENDS = ["local", "kubernetes", "slurm"]
ENDS_SECONDS = 20.0
NODE_DOWN_SECONDS = 60.0  # Slurm: SlurmdTimeout=10, then its next ping round
# An elastic job's workers run ``torchrun``, found on the job's PATH: the training
# environment's first, as a job of the portal's own would have it.
TRAINING_ENV = Path("/opt/trainyard/training-env")
JOB_PATH_WITH_TORCHRUN = f"{TRAINING_ENV}/bin:{JOB_PATH}"


@pytest.fixture(params=BACKENDS)
def harness(request) -> Iterator[Harness]:
    with reachable_directory() as directory:
        harness = _harness(request, request.param, directory)
        try:
            yield harness
        finally:
            harness.clean_up()
            if isinstance(harness.backend, KubernetesBackend) and harness.backend.logs:
                harness.backend.logs.stop()


def _harness(request, name: str, directory) -> Harness:
    logs = directory / "logs"
    backend: ClusterBackend
    if name == "kubernetes":
        cluster = request.getfixturevalue("k8s_cluster")
        cluster.require_fake()
        backend = KubernetesBackend(
            cluster.settings, api_client=cluster.api_client, watch_nodes=False, log_dir=logs
        )
        from tests.jobmanager.test_kubernetes_backend import MIA

        return Harness(name, backend, tuple(cluster.nodes[:2]), MIA, logs, False, cluster)
    require_root()
    account = job_account("conform")
    if name == "local":
        backend = LocalBackend(
            directory / "state", logs, nodes="cf-node-1:A100:4,cf-node-2:A100:4",
            cgroup_root=None, kill_after_seconds=1,
            sandbox_readonly_paths=shared_with_jobs(directory), job_path=JOB_PATH_WITH_TORCHRUN,
        )  # fmt: skip
        return Harness(name, backend, ("cf-node-1", "cf-node-2"), account, logs, True)
    cluster = request.getfixturevalue("slurm_cluster")
    backend = SlurmBackend(
        directory / "state", logs, conf=str(cluster.conf), job_path=JOB_PATH_WITH_TORCHRUN
    )
    return Harness(name, backend, ("node1", "node2"), account, logs, True, slurm=cluster)


def a_job_id() -> str:
    return uuid.uuid4().hex[:10]


def report_when(
    harness: Harness, job_id: str, condition: Callable[[JobReport], bool], what: str
) -> JobReport:
    """The job's report, once ``condition`` holds for it."""

    def holds() -> JobReport | None:
        report = harness.backend.reports().get(job_id)
        return report if report is not None and condition(report) else None

    found = wait_until(holds, ENDS_SECONDS, what)
    assert found is not None
    return found


def states(report: JobReport) -> list[tuple[str, int | None]]:
    return [(worker.state, worker.exit_code) for worker in report.workers]


# --- deploy and report --------------------------------------------------------------------


def test_a_gang_runs_every_worker_and_reports_each_one_s_exit_code(harness):
    work = Work(exit_codes=(0, 3))
    launch = harness.launch(a_job_id(), work.command)

    harness.backend.deploy(launch)
    harness.play(launch, work)

    report = report_when(harness, launch.job_id, lambda r: r.ended, "the gang ends")
    assert states(report) == [(WorkerState.SUCCEEDED, 0), (WorkerState.FAILED, 3)]
    failed = report.failed_worker
    assert failed is not None and failed.rank == 1 and not report.succeeded


def test_every_worker_s_output_reaches_the_log_store(harness):
    work = Work(exit_codes=(0, 0))
    launch = harness.launch(a_job_id(), work.command)

    harness.backend.deploy(launch)
    harness.play(launch, work)

    report_when(harness, launch.job_id, lambda r: r.succeeded, "the gang succeeds")
    wait_until(
        lambda: all(work.line(rank) in harness.log(launch.job_id, rank) for rank in (0, 1)),
        ENDS_SECONDS,
        "each worker's line in its log",
    )


def test_running_workers_are_reported_running(harness):
    work = Work()
    launch = harness.launch(a_job_id(), work.command)

    harness.backend.deploy(launch)
    harness.play(launch, work)

    report = report_when(harness, launch.job_id, lambda r: r.started, "every worker leaves pending")
    assert states(report) == [(WorkerState.RUNNING, None)] * 2


def test_deploying_the_same_attempt_twice_starts_it_once(harness):
    work = Work()
    launch = harness.launch(a_job_id(), work.command)

    harness.backend.deploy(launch)
    harness.backend.deploy(launch)
    harness.play(launch, work)

    report = report_when(harness, launch.job_id, lambda r: r.started, "the workers start")
    assert [worker.rank for worker in report.workers] == [0, 1]
    if harness.executes:  # each worker printed its line once
        wait_until(lambda: work.line(1) in harness.log(launch.job_id, 1), ENDS_SECONDS, "a line")
        assert harness.log(launch.job_id, 1).count(work.line(1)) == 1


# --- stop and remove ----------------------------------------------------------------------


def test_stop_ends_every_worker_and_remove_forgets_the_job(harness):
    work = Work()
    launch = harness.launch(a_job_id(), work.command)
    harness.backend.deploy(launch)
    harness.play(launch, work)
    report_when(harness, launch.job_id, lambda r: r.started, "the workers start")

    harness.backend.stop(launch.job_id, 5)
    harness.play_stopped(launch)

    def ended() -> bool:
        report = harness.backend.reports().get(launch.job_id)
        return report is None or report.ended

    wait_until(ended, ENDS_SECONDS, "the stopped job ends")
    report = harness.backend.reports().get(launch.job_id)
    if report is not None:  # Kubernetes forgets pods the kubelet ended; others keep them
        assert all(w.state == WorkerState.FAILED for w in report.workers)
        if harness.executes:  # SIGTERM ended them, within the grace
            assert {w.exit_code for w in report.workers} == {143}
    harness.backend.remove(launch.job_id)
    assert launch.job_id not in harness.backend.reports()


def test_a_worker_that_ignores_sigterm_is_killed_once_the_grace_has_passed(harness):
    if not harness.executes:
        pytest.skip("the fake runs no process; the grace is the API server's (its own test)")
    command = "trap '' TERM; echo \"hello from rank $RANK\"; while :; do sleep 1; done"
    launch = harness.launch(a_job_id(), command)
    harness.backend.deploy(launch)
    report_when(harness, launch.job_id, lambda r: r.started, "the workers start")

    harness.backend.stop(launch.job_id, 1)

    report = report_when(harness, launch.job_id, lambda r: r.ended, "the job is killed")
    assert all(w.state == WorkerState.FAILED for w in report.workers)


# --- the workers' environment -------------------------------------------------------------

RENDEZVOUS = """\
import os, socket, time
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
rank = int(os.environ["RANK"])
if rank == 0:
    server = socket.create_server((addr, port))
    peer, _ = server.accept()
    print("rank 0 heard:", peer.recv(200).decode(), flush=True)
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            peer = socket.create_connection((addr, port), timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    peer.sendall(f"rank {rank} of {os.environ['WORLD_SIZE']}".encode())
"""


def test_workers_meet_at_rank_0_s_master_address_as_torchrun_expects(harness):
    if not harness.executes:
        pytest.skip("the fake runs no process (its environment: test_kubernetes_backend)")
    script = harness.log_dir.parent / "rendezvous.py"
    script.write_text(RENDEZVOUS)
    script.chmod(0o644)
    launch = harness.launch(a_job_id(), f"{JOB_PYTHON} {script}")

    harness.backend.deploy(launch)

    report = report_when(harness, launch.job_id, lambda r: r.ended, "the workers meet")
    assert states(report) == [(WorkerState.SUCCEEDED, 0)] * 2, harness.log(launch.job_id, 0)
    assert "rank 0 heard: rank 1 of 2" in harness.log(launch.job_id, 0)


# --- nodes --------------------------------------------------------------------------------


def test_the_nodes_are_listed_with_their_gpus_and_ready(harness):
    nodes = {node.name: node for node in harness.backend.nodes()}

    for name in harness.nodes:
        assert nodes[name].ready and nodes[name].gpus >= 2 and nodes[name].gpu_type
        assert nodes[name].millicpus > 0 and nodes[name].memory > 0


def test_a_failed_node_fails_its_worker_naming_the_node(harness):
    if harness.name == "local":
        pytest.skip("the local backend's nodes are this host: there is none to lose")
    work = Work()
    launch = harness.launch(a_job_id(), work.command)
    harness.backend.deploy(launch)
    harness.play(launch, work)
    report_when(harness, launch.job_id, lambda r: r.started, "the workers start")
    lost = harness.nodes[1]

    _lose_node(harness, lost)
    try:
        report = wait_until(
            lambda: (r := harness.backend.reports()[launch.job_id]).failed_worker and r,
            NODE_DOWN_SECONDS,
            "the worker on the lost node fails",
        )
        failed = report.failed_worker
        assert failed.rank == 1 and failed.reason.startswith(f"{NODE_UNHEALTHY}: node {lost}")
        assert not {n.name: n for n in harness.backend.nodes()}[lost].ready
    finally:
        _restore_node(harness, lost)


def _lose_node(harness: Harness, node: str) -> None:
    if harness.kubernetes is not None:
        harness.kubernetes.fake.set_node_ready(node, False)
        assert isinstance(harness.backend, KubernetesBackend)
        harness.backend.node_watcher.watch_once(timeout_seconds=5)
    else:
        harness.slurm.kill_node(node)


def _restore_node(harness: Harness, node: str) -> None:
    if harness.kubernetes is not None:
        harness.kubernetes.fake.set_node_ready(node, True)
        return
    for job_id in harness.launched:
        harness.backend.stop(job_id, 0)
    harness.slurm.start_node(node)
    wait_until_idle(harness.slurm, [node], NODE_DOWN_SECONDS)


# --- into a worker: the SSH gateway's target ----------------------------------------------

# Worker 1 serves on its node's loopback (the local backend's workers share the host's).
SERVER = (
    'if [ "$RANK" = 1 ]; then '
    f"exec {JOB_PYTHON} -m http.server --bind 127.0.0.1 {{port}} >/dev/null 2>&1; "
    "else exec sleep 600; fi"
)


def _target(harness: Harness):
    """The gateway's target for the backend (the Kubernetes fake runs no process: its
    exec and port-forward are tests/backend/gateway/test_ssh_gateway_kubernetes.py's)."""
    if harness.name == "kubernetes":
        pytest.skip("the fake runs no process to enter (see test_ssh_gateway_kubernetes)")
    from backend.gateway.slurm import SlurmTarget
    from backend.gateway.targets import LocalTarget

    if isinstance(harness.backend, SlurmBackend):
        return SlurmTarget(harness.backend)
    return LocalTarget(harness.backend)


def _admission(launch, rank: int):
    from backend.gateway.access import Admission, Login

    return Admission(Login(launch.owner, launch.job_id, rank), 1, 1, len(launch.workers), 1)


def _serving_job(harness: Harness):
    port = free_port()
    launch = harness.launch(a_job_id(), SERVER.format(port=port))
    harness.backend.deploy(launch)
    report_when(harness, launch.job_id, lambda r: r.started, "the workers start")
    return launch, port


def test_a_session_into_a_worker_runs_there_as_its_owner_with_its_exit_status(harness):
    target = _target(harness)
    launch, _ = _serving_job(harness)
    admission = _admission(launch, 1)
    assert wait_until(lambda: target.available(admission), ENDS_SECONDS, "worker 1 to enter")

    async def session(tty):
        output = bytearray()

        async def collect(chunk: bytes) -> None:
            output.extend(chunk)

        command = ["/bin/sh", "-c", 'echo "$RANK $TRAINYARD_NODE $(id -un) $SEEN"; tty; exit 7']
        process = await target.start(admission, command, {"SEEN": "yes"}, collect, collect, tty)
        process.close_input()
        code = await asyncio.wait_for(process.wait(), ENDS_SECONDS)
        process.close()
        return code, output.decode().replace("\r", "").splitlines()

    piped, terminal = asyncio.run(session(None)), asyncio.run(session((100, 30)))

    expected = f"1 {harness.nodes[1]} {launch.owner} yes"
    assert piped == (7, [expected, "not a tty"])
    assert terminal[0] == 7 and terminal[1][0] == expected
    assert terminal[1][1].startswith("/dev/pts/")


def test_a_port_forward_reaches_the_job_s_own_server_and_no_other_port(harness):
    target = _target(harness)
    launch, port = _serving_job(harness)
    from backend.gateway.ports import NotTheJobs, connect

    def listener(job_id: str, port: int):
        with contextlib.suppress(NotTheJobs):
            return target.listener(job_id, "localhost", port, 1)
        return None

    found = wait_until(lambda: listener(launch.job_id, port), ENDS_SECONDS, "its server")
    with connect(found) as connection:
        connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
        answer = connection.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.0 200")

    # Another job of the same owner serves beside it: not this job's port.
    other, other_port = _serving_job(harness)
    wait_until(lambda: listener(other.job_id, other_port), ENDS_SECONDS, "the other's server")
    # Refused as another's port, or (a job in a network namespace of its own, the local
    # sandbox) as no port of the job's at all.
    refused = "is not job {0}'s|no process of job {0} listens on port {1}"
    with pytest.raises(NotTheJobs, match=refused.format(launch.job_id, other_port)):
        target.listener(launch.job_id, "localhost", other_port, 1)

    # Root's server on the worker's node: refused.
    with _stranger(harness) as stranger, pytest.raises(NotTheJobs) as refusal:
        target.listener(launch.job_id, "localhost", stranger, 1)
    assert re.search(refused.format(launch.job_id, stranger), str(refusal.value))
    with pytest.raises(NotTheJobs, match="no process of job"):
        target.listener(launch.job_id, "localhost", free_port(), 1)


@contextlib.contextmanager
def _stranger(harness: Harness) -> Iterator[int]:
    """A port a process that is not the job's listens on, on worker 1's node."""
    if harness.slurm is not None:  # slurmd, on every address of the node
        yield harness.slurm.node_port
        return
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


# --- elastic jobs ------------------------------------------------------------------------

RESIZE_SECONDS = 60.0


def test_a_resize_brings_a_running_elastic_job_to_its_new_workers_in_the_same_attempt(harness):
    if not harness.backend.resizes:
        pytest.skip(f"the {harness.name} backend does not resize: elastic jobs keep their size")
    if harness.executes and not (TRAINING_ENV / "bin" / "torchrun").exists():
        pytest.skip("no training environment with torchrun here (make training-env)")
    work = Work()
    job_id = a_job_id()
    launch = harness.elastic(harness.launch(job_id, work.command), 2, 3)
    harness.backend.deploy(launch)
    harness.play(launch, work)
    wait_until(lambda: said_ranks(harness, job_id) == {0, 1}, RESIZE_SECONDS, "2 workers meet")

    grown = harness.elastic(harness.launch(job_id, work.command, workers=3), 2, 3)
    harness.resize(grown, 5, RESIZE_SECONDS)
    harness.play(grown, work)

    # Under torchrun a worker's RANK is the rendezvous's: rank 2 is said once 3 met.
    wait_until(lambda: 2 in said_ranks(harness, job_id), RESIZE_SECONDS, "3 workers meet")
    report = report_when(harness, job_id, lambda r: r.started, "every worker leaves pending")
    assert report.attempt == 1  # the same attempt, not a new one
    assert states(report) == [(WorkerState.RUNNING, None)] * 3


def said_ranks(harness: Harness, job_id: str) -> set[int]:
    """The ranks the job's workers said they were, in any of their logs (a report first:
    it is what follows the Kubernetes pods' logs into the store)."""
    harness.backend.reports()
    logs = "".join(harness.log(job_id, rank) for rank in range(3))
    return {int(rank) for rank in re.findall(r"hello from rank (\d+)", logs)}
