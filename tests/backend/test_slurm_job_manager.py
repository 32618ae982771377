"""The job manager with the Slurm backend, on a real cluster of three nodes in network
namespaces: the nodes come from Slurm; a job submitted through the API runs as its
owner on the nodes the scheduler chose and finishes with its exit code; a node Slurm
loses takes the job back to the head of the queue, saying which node failed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backend.clusters.models import GpuType, Node
from backend.jobs.backends import get_backend
from backend.jobs.models import Job, JobStatus
from jobmanager.backends.slurm import SlurmBackend
from tests.backend.jobs_support import JobManager
from tests.factories import QuotaFactory
from tests.servers import wait_until
from tests.slurm_cluster import GPU_TYPE, wait_until_idle
from tests.unix_accounts import reachable_directory, require_root

pytestmark = pytest.mark.django_db
JOBS = "/api/v1/jobs/"
NODE_DOWN_SECONDS = 60.0


@pytest.fixture
def backend(slurm_cluster, settings) -> Iterator[SlurmBackend]:
    require_root()
    with reachable_directory() as directory:
        settings.TRAINYARD_LOG_DIR = directory / "logs"
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

    wait_until(reached, 30, what)
    return Job.objects.get(pk=job.pk)


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
    placed = [worker["node"] for worker in job.placement]
    for rank, node in enumerate(placed):
        log = (jobs.backend.log_dir / job.job_id / f"worker-{rank}.log").read_text()
        assert f"rank {rank} of 2 on {node} as ty-test-mia" in log


def test_a_node_slurm_loses_requeues_the_job_at_the_head_naming_the_node(
    world, jobs, slurm_cluster
):
    job = submit(world, command="sleep 600", gpus_per_worker=4, max_retries=0)
    job = status_after_runs(jobs, job, {JobStatus.RUNNING}, "the job runs")
    wait_until(lambda: jobs.backend.reports()[job.job_id].started, 30, "every worker to start")
    lost = job.placement[1]["node"]

    slurm_cluster.kill_node(lost)
    try:

        def attempt_ended() -> bool:
            jobs.run()
            return job.attempts.filter(number=1, ended_at__isnull=False).exists()

        wait_until(attempt_ended, NODE_DOWN_SECONDS, "attempt 1 ends")
        requeued = Job.objects.get(pk=job.pk)
        assert requeued.failure_rule == "node-unhealthy"
        assert f"node {lost}" in requeued.repair_message
        assert not Node.objects.get(name=lost).ready
    finally:
        slurm_cluster.start_node(lost)
        for job_id in jobs.backend.reports():
            jobs.backend.stop(job_id, 0)
        wait_until_idle(slurm_cluster, [lost], NODE_DOWN_SECONDS)
