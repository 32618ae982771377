"""The job manager with the Slurm backend, on a real cluster of three nodes in network
namespaces: the nodes come from Slurm; a job submitted through the API runs as its
owner on the nodes the scheduler chose and finishes with its exit code; a node Slurm
loses takes the job back to the head of the queue, saying which node failed; two
workers on two nodes train over gloo; a node the repair manager takes out is drained in
Slurm until it returns."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from collections import Counter
from collections.abc import Iterator

import pytest

from backend.clusters.backends import get_backend
from backend.clusters.models import GpuType, Node
from backend.jobs.models import Job, JobStatus
from backend.repairs.actions import move_node
from jobmanager.backends import WorkerState
from jobmanager.backends.slurm import SlurmBackend
from jobmanager.backends.slurm_commands import SlurmJob
from repairmanager.states import RepairState
from tests.backend.jobs_support import JobManager
from tests.factories import QuotaFactory
from tests.polling import wait_until
from tests.slurm_cluster import GPU_TYPE, wait_until_idle
from tests.unix_accounts import (
    JOB_PYTHON,
    JOB_PYTHONPATH,
    job_account,
    reachable_directory,
    readable_script,
    require_root,
)

pytestmark = pytest.mark.django_db
# Data-parallel training of a linear model over gloo: each rank its own batches, the
# gradients all-reduced; rank 0's node address and port from the backend (env://).
TRAIN = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
batches, target = torch.Generator().manual_seed(rank), torch.arange(8.0)
losses = []
for step in range(40):
    x = torch.randn(64, 8, generator=batches)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(1), x @ target)
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()
    losses.append(loss.item())
weights = sum(p.sum().item() for p in model.parameters())
print(f"rank {rank} of {world} on {os.uname().nodename} via {os.environ['MASTER_ADDR']}: "
      f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, weights {weights:.6f}", flush=True)
dist.destroy_process_group()
"""
TRAINED = re.compile(r"rank (\d) of 2 on (\S+) via (\S+): loss (\S+) -> (\S+), weights (\S+)")
JOBS = "/api/v1/jobs/"
NODE_DOWN_SECONDS = 60.0


@pytest.fixture
def backend(slurm_cluster, settings) -> Iterator[SlurmBackend]:
    require_root()
    with reachable_directory() as directory:
        settings.TRAINYARD_LOG_DIR = directory / "logs"
        settings.TRAINYARD_SLURM_STATE_DIR = directory / "state"  # scripts for jobs go here
        backend = SlurmBackend(directory / "state", directory / "logs", str(slurm_cluster.conf))
        try:
            yield backend
        finally:
            for job_id in backend.reports():
                backend.stop(job_id, 0)
                backend.remove(job_id)


@pytest.fixture
def jobs(backend, world, redis_namespace) -> JobManager:
    """The job manager, with the Slurm nodes registered and a quota of their GPUs for
    ``vision`` (the world's own nodes, which Slurm does not report, are not ready)."""
    manager = JobManager(backend)
    manager.run()
    QuotaFactory(vc=world.vision, gpu_type=GpuType.objects.get(name=GPU_TYPE), gpus=12)
    return manager


def submit(world, **spec) -> Job:
    body = {
        "vc": "vision",
        "gpu_type": GPU_TYPE,
        "command": "echo rank $RANK of $WORLD_SIZE on $(hostname) as $(id -un)",
        "gpus_per_worker": 4,
        "workers": 2,
    } | spec
    response = world.client(world.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def status_after_runs(jobs: JobManager, job: Job, statuses: set[str], what: str) -> Job:
    def reached() -> bool:
        jobs.run()
        return Job.objects.get(pk=job.pk).status in statuses

    try:
        wait_until(reached, 30, what)
    except AssertionError:
        print(what_happened(jobs, job))
        raise
    return Job.objects.get(pk=job.pk)


def what_happened(jobs: JobManager, job: Job) -> str:
    """A job's path, its workers' logs and Slurm's view of its allocations: what a test
    that timed out waiting for it prints."""
    job = Job.objects.get(pk=job.pk)
    events = [
        f"{event.from_status}->{event.to_status}: {event.reason}"
        for event in job.events.order_by("pk")
    ]
    logs = {
        path.name: path.read_text()[-2000:]
        for path in sorted((jobs.backend.log_dir / job.job_id).glob("*.log"))
    }
    allocations = [
        (slurm_job.job_id, slurm_job.name, slurm_job.state, slurm_job.reason, slurm_job.nodes)
        for slurm_job in jobs.backend.slurm.jobs()
        if slurm_job.name.startswith(f"ty-{job.job_id}-")
    ]
    return (
        f"job {job.job_id} {job.status}, attempt {job.attempt}; events {events}; "
        f"Slurm's allocations {allocations}; logs {logs}"
    )


def placed_nodes(job: Job) -> list[str]:
    """Where the first attempt's workers were placed, by rank."""
    return [worker["node"] for worker in job.attempts.get(number=1).gpus]


def worker_log(jobs: JobManager, job: Job, rank: int) -> str:
    return (jobs.backend.log_dir / job.job_id / f"worker-{rank}.log").read_text()


def test_trainyard_backend_slurm_builds_the_backend_from_the_settings(settings, tmp_path):
    settings.TRAINYARD_BACKEND = "slurm"
    settings.TRAINYARD_SLURM_CONF = "/etc/slurm/elsewhere.conf"
    settings.TRAINYARD_SLURM_PARTITION = "gpu"
    settings.TRAINYARD_SLURM_STATE_DIR = tmp_path / "state"
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"

    backend = get_backend()

    assert isinstance(backend, SlurmBackend)
    assert (backend.slurm.conf, backend.partition) == ("/etc/slurm/elsewhere.conf", "gpu")


def test_the_nodes_come_from_slurm(jobs, slurm_cluster):
    nodes = {node.name: node for node in Node.objects.filter(name__in=slurm_cluster.nodes)}

    assert sorted(nodes) == slurm_cluster.nodes
    assert all(
        node.ready and node.gpus == 4 and node.gpu_type.name == GPU_TYPE for node in nodes.values()
    )


def test_a_submitted_job_runs_as_its_owner_on_the_nodes_placed_and_finishes(world, jobs):
    job = submit(world)

    job = status_after_runs(jobs, job, {JobStatus.FINISHED, JobStatus.FAILED}, "the job ends")

    assert (job.status, job.exit_code) == (JobStatus.FINISHED, 0)
    placed = placed_nodes(job)
    assert len(placed) == 2
    for rank, node in enumerate(placed):
        log = worker_log(jobs, job, rank)
        assert f"rank {rank} of 2 on {node} as ty-test-mia" in log


# Rank 0 counts steps into a checkpoint in the job's working directory (on the filesystem
# the nodes share); every attempt starts from the step the checkpoint holds.
CHECKPOINTED = (
    "step=$(cat checkpoint 2>/dev/null || echo 0); "
    'echo "attempt $TRAINYARD_ATTEMPT rank $RANK from step $step on $(hostname)"; '
    'while :; do step=$((step + 1)); if [ "$RANK" = 0 ]; then '
    "echo $step > checkpoint.tmp && mv checkpoint.tmp checkpoint; fi; sleep 0.2; done"
)
RESUMED = re.compile(r"attempt (\d+) rank 0 from step (\d+) on (\S+)")


def test_a_node_slurm_loses_requeues_the_job_at_the_head_naming_the_node(
    world, jobs, slurm_cluster
):
    job = submit(world, command=CHECKPOINTED, gpus_per_worker=4, max_retries=0)
    job = status_after_runs(jobs, job, {JobStatus.RUNNING}, "the job runs")
    wait_until(lambda: jobs.backend.reports()[job.job_id].started, 30, "every worker to start")
    lost = placed_nodes(job)[1]
    owner = job_account_of(job)
    queued_at = job.queued_at
    checkpoint = jobs.backend.state_dir / job.job_id / "work" / "checkpoint"
    wait_until(lambda: _step(checkpoint) >= 3, 30, "rank 0 to checkpoint a few steps")

    slurm_cluster.kill_node(lost)
    try:

        def running_again() -> bool:
            jobs.run()
            job.refresh_from_db()
            return job.attempt == 2 and job.status == JobStatus.RUNNING

        wait_until(running_again, NODE_DOWN_SECONDS, "attempt 2 runs")
        assert job.attempts.get(number=1).failure_rule == "node-unhealthy"
        assert job.failure_rule == "node-unhealthy" and job.retries_used == 0
        assert f"node {lost}" in job.repair_message
        assert not Node.objects.get(name=lost).ready
        assert lost not in [worker["node"] for worker in job.placement]  # elsewhere now
        assert job.queued_at == queued_at  # at the head: its place in the queue kept
        assert processes_of(slurm_cluster, lost, owner)  # still there: the node is cut off

        def resumed() -> list[tuple[str, ...]]:
            starts = RESUMED.findall(worker_log(jobs, job, 0))
            return [start for start in starts if start[0] == "2"]

        wait_until(resumed, 30, "attempt 2's rank 0 to start")
        ((_, step, node),) = resumed()
        assert int(step) >= 3 and node != lost  # from the checkpoint, on another node
        wait_until(lambda: _step(checkpoint) > int(step), 30, "attempt 2 to go on from it")
    finally:
        slurm_cluster.start_node(lost)
    # Back, slurmd learns the job ended and kills what it left there.
    wait_until(lambda: not processes_of(slurm_cluster, lost, owner), 30, "the strays gone")
    wait_until_idle(slurm_cluster, [lost], NODE_DOWN_SECONDS)


def _step(checkpoint) -> int:
    try:
        return int(checkpoint.read_text())
    except (OSError, ValueError):
        return 0


def job_account_of(job: Job) -> int:
    """The uid the job's processes run as: its owner's account's."""
    return pwd.getpwnam(f"ty-test-{job.owner.username}").pw_uid


def processes_of(cluster, node: str, uid: int) -> list[int]:
    """The processes of ``uid`` in the node's network namespace."""
    listed = subprocess.run(
        ["ip", "netns", "pids", cluster.namespace(node)], capture_output=True, text=True
    ).stdout.split()
    return [int(pid) for pid in listed if _owner(int(pid)) == uid]


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def test_two_workers_on_two_nodes_train_over_gloo_and_the_loss_goes_down(
    world, jobs, settings, slurm_cluster
):
    script = readable_script(settings.TRAINYARD_SLURM_STATE_DIR, "train.py", TRAIN)
    job = submit(
        world,
        type="distributed",
        command=f"{JOB_PYTHON} {script}",
        env={"PYTHONPATH": JOB_PYTHONPATH, "GLOO_SOCKET_IFNAME": "eth0"},
    )  # 4 GPUs per worker: a node each

    job = status_after_runs(jobs, job, {JobStatus.FINISHED, JobStatus.FAILED}, "training ends")

    logs = [worker_log(jobs, job, rank) for rank in (0, 1)]
    assert job.status == JobStatus.FINISHED, logs
    lines = [TRAINED.search(log) for log in logs]
    assert lines[0] and lines[1], logs
    nodes = [line[2] for line in lines]
    assert nodes == placed_nodes(job) and nodes[0] != nodes[1]
    assert {line[3] for line in lines} == {slurm_cluster.node_address(nodes[0])}  # rank 0's
    for line in lines:
        assert float(line[5]) < float(line[4]) / 10  # it learnt
    assert lines[0][6] == lines[1][6]  # the same model on both nodes: gradients all-reduced


def test_a_node_the_repair_manager_takes_out_is_drained_in_slurm_until_it_returns(
    world, jobs, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr("backend.clusters.backends.get_backend", lambda: jobs.backend)
    slurm = jobs.backend.slurm
    node = Node.objects.get(name="node3")

    with django_capture_on_commit_callbacks(execute=True):
        move_node(node, RepairState.OUT_OF_POOL, "GPU 2: double-bit ECC errors")
    assert "DRAIN" in {n.name: n.states for n in slurm.nodes()}["node3"]
    account = job_account("conform")
    elsewhere = slurm.submit(
        "#!/bin/sh\ntrue\n", account.uid, account.gid, ["--nodelist=node3", "-N1"]
    )
    try:  # nothing of Slurm's own lands there either: it waits, saying why

        def held() -> SlurmJob:
            return next(job for job in slurm.jobs() if job.job_id == elsewhere)

        wait_until(lambda: held().reason not in ("", "None"), 30, "Slurm to decide")
        assert (held().state, held().reason) == ("PENDING", "ReqNodeNotAvail")
    finally:
        slurm.cancel(elsewhere)

    with django_capture_on_commit_callbacks(execute=True):
        for state in (
            RepairState.READY_FOR_REPAIR,
            RepairState.IN_REPAIR,
            RepairState.AFTER_REPAIR,
        ):
            move_node(Node.objects.get(pk=node.pk), state, "by hand")
        move_node(Node.objects.get(pk=node.pk), RepairState.IN_SERVICE, "GPU 2 swapped")

    wait_until(
        lambda: {n.name: n for n in jobs.backend.nodes()}["node3"].ready, 30, "node3 resumed"
    )


def test_ffdl_gang_burst_on_slurm_every_gpu_in_a_whole_gang_and_no_partial_gang(
    world, jobs, settings
):
    """FfDL's gang-scheduling scenario on the three Slurm nodes (12 GPUs): 50 jobs of
    2 x 1 GPU at once. Six whole gangs run in Slurm, every worker of each started, no GPU
    held twice; the other 44 wait in Trainyard, none half-started or pending in Slurm.
    Killed, Slurm holds nothing of them."""
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    burst = [submit(world, gpus_per_worker=1, command="sleep 600") for _ in range(50)]
    ids = [job.job_id for job in burst]

    def counts() -> Counter:
        return Counter(Job.objects.filter(job_id__in=ids).values_list("status", flat=True))

    def six_gangs_run() -> bool:
        jobs.run()
        reports = jobs.backend.reports()
        return counts() == Counter({"running": 6, "queued": 44}) and all(
            report.started and all(w.state == WorkerState.RUNNING for w in report.workers)
            for report in reports.values()
        )

    wait_until(six_gangs_run, 60, "six whole gangs running in Slurm, 44 waiting")

    running = Job.objects.filter(job_id__in=ids, status=JobStatus.RUNNING)
    held = Counter((w["node"], gpu) for job in running for w in job.placement for gpu in w["gpus"])
    assert len(held) == 12 and set(held.values()) == {1}  # every GPU, each once
    live = live_slurm_jobs(jobs, ids)
    assert len(live) == 6 and all(job.state == "RUNNING" for job in live)  # none pending

    response = world.client(world.member).post(
        f"{JOBS}batch/", {"action": "kill", "ids": ids}, format="json"
    )
    assert response.status_code == 200, response.json()

    def all_killed() -> bool:
        jobs.run()
        return counts() == Counter({"killed": 50})

    wait_until(all_killed, 60, "every job killed")
    wait_until(lambda: not live_slurm_jobs(jobs, ids), 30, "Slurm to hold nothing of them")


def test_ffdl_fragmentation_on_slurm_small_jobs_packed_leave_a_whole_node_for_a_4_gpu_one(
    world, jobs, settings
):
    """FfDL's fragmentation scenario on the Slurm nodes: three 1-GPU jobs are packed onto
    one node in Slurm, so a 4-GPU job gets a whole node of its own at once."""
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    small = [submit(world, workers=1, gpus_per_worker=1, command="sleep 600") for _ in range(3)]
    for job in small:
        status_after_runs(jobs, job, {JobStatus.RUNNING}, "the small jobs run")

    big = submit(world, workers=1, gpus_per_worker=4, command="sleep 600")
    big = status_after_runs(jobs, big, {JobStatus.RUNNING}, "the 4-GPU job runs")

    ids = [job.job_id for job in (*small, big)]
    wait_until(
        lambda: [job.state for job in live_slurm_jobs(jobs, ids)] == ["RUNNING"] * 4,
        30,
        "the four jobs running in Slurm",
    )
    slurm_nodes = {job.name.rsplit("-a", 1)[0]: job.nodes for job in live_slurm_jobs(jobs, ids)}
    small_nodes = {slurm_nodes[f"ty-{job.job_id}"] for job in small}
    assert len(small_nodes) == 1  # packed
    assert slurm_nodes[f"ty-{big.job_id}"] not in small_nodes
    assert slurm_nodes[f"ty-{big.job_id}"] == placed_nodes(big)[0]


def live_slurm_jobs(jobs: JobManager, ids: list[str]) -> list[SlurmJob]:
    """The Slurm jobs of these Trainyard jobs (any attempt) that have not ended."""
    ours = {f"ty-{job_id}" for job_id in ids}
    return [
        job
        for job in jobs.backend.slurm.jobs()
        if not job.ended and job.name.rsplit("-a", 1)[0] in ours
    ]
