"""The embedded default's inventory is the registered nodes, followed live: a node
registered, relabelled, cordoned or removed through the API takes effect in the job
manager's next pass, with every job a real process on this host (the local backend);
and a node the backend has never reported is not taken for a failed one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from backend.clusters.inventory import REGISTERED, registered_nodes
from backend.clusters.models import Node
from backend.jobmanager.node_sync import sync_nodes
from backend.jobmanager.removal import remove_drained_nodes
from backend.jobs.models import Job, JobStatus, StopOutcome
from jobmanager.backends.base import BackendNode
from jobmanager.backends.local import LocalBackend
from repairmanager.planning import NodeFacts, observe
from repairmanager.rules import load_rules
from repairmanager.states import RepairState
from tests.backend.jobs_support import JobManager
from tests.polling import wait_until
from tests.sandbox_network import shared_with_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

NODES = "/api/v1/nodes/"
JOBS = "/api/v1/jobs/"


@pytest.fixture
def backend(host_tmp, settings) -> Iterator[LocalBackend]:
    settings.TRAINYARD_BACKEND = "local"
    settings.TRAINYARD_LOCAL_NODES = REGISTERED
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 1
    backend = LocalBackend(
        host_tmp / "state", host_tmp / "logs", nodes=registered_nodes, cgroup_root=None,
        kill_after_seconds=1, sandbox_readonly_paths=shared_with_jobs(host_tmp),
    )  # fmt: skip
    yield backend
    for job_id in backend.reports():
        backend.remove(job_id)


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


def register(world, name: str = "a100-9", **fields) -> dict:
    body = {"name": name, "gpu_type": "A100", "gpus": 8, "cpus": 64, "memory": "512Gi"} | fields
    response = world.client(world.staff).post(NODES, body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def submit(world, **spec) -> Job:
    body = {"vc": "vision", "gpu_type": "A100", "gpus_per_worker": 8, "command": "sleep 60"}
    response = world.client(world.member).post(JOBS, body | spec, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def nodes_of(job: Job) -> set[str]:
    job.refresh_from_db()
    return {worker["node"] for worker in job.placement}


def test_a_node_registered_while_the_system_runs_takes_a_job_in_the_next_pass(world, jobs, backend):
    register(world, labels={"pool": "fresh"})
    job = submit(world, node_selector={"pool": "fresh"})

    jobs.run()

    assert "a100-9" in {node.name for node in backend.nodes()}
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert nodes_of(job) == {"a100-9"}
    assert backend.reports()[job.job_id].workers[0].state == "running"  # a real process
    node = Node.objects.get(name="a100-9")
    assert (node.ready, node.ready_reason) == (True, "")


def test_a_relabelled_node_takes_the_jobs_its_new_labels_select(world, jobs):
    client = world.client(world.staff)
    relabel = client.patch(f"{NODES}a100-3/", {"labels": {"rack": "r7"}}, format="json")
    assert relabel.status_code == 200
    job = submit(world, node_selector={"rack": "r7"})

    jobs.run()

    assert nodes_of(job) == {"a100-3"}


def test_a_cordoned_node_takes_no_new_work_and_keeps_what_runs(world, jobs):
    register(world, labels={"pool": "fresh"})
    first = submit(world, node_selector={"pool": "fresh"}, gpus_per_worker=4)
    jobs.run()
    assert world.client(world.staff).post(f"{NODES}a100-9/cordon/").status_code == 200

    second = submit(world, node_selector={"pool": "fresh"}, gpus_per_worker=4)
    jobs.run()

    assert Job.objects.get(pk=first.pk).status == JobStatus.RUNNING
    second.refresh_from_db()
    assert second.status == JobStatus.QUEUED and second.placement == []


def test_a_removed_node_drains_and_goes_once_its_job_has_ended(world, jobs, host_tmp):
    register(world, labels={"pool": "fresh"})
    done = host_tmp / "done"
    job = submit(
        world, node_selector={"pool": "fresh"},
        command=f"while [ ! -e {done} ]; do sleep 0.05; done; echo finished",
    )  # fmt: skip
    jobs.run()

    answer = world.client(world.staff).delete(f"{NODES}a100-9/")

    assert answer.status_code == 202, answer.content
    assert answer.json()["schedulable"] is False and answer.json()["removal_requested_at"]
    jobs.run()
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING  # it may finish there
    assert Node.objects.filter(name="a100-9").exists()
    done.touch()

    def finished() -> bool:
        jobs.run()
        return Job.objects.get(pk=job.pk).status == JobStatus.FINISHED

    wait_until(finished, 20, "the job to finish on the draining node")
    jobs.run()

    assert not Node.objects.filter(name="a100-9").exists()
    assert world.client(world.staff).get(f"{NODES}a100-9/").status_code == 404


def test_a_node_with_no_job_is_removed_at_once_and_only_by_cluster_admins(world, jobs):
    register(world)
    assert world.client(world.member).delete(f"{NODES}a100-9/").status_code == 403

    assert world.client(world.staff).delete(f"{NODES}a100-9/").status_code == 204
    assert not Node.objects.filter(name="a100-9").exists()


def test_jobs_still_on_a_draining_node_after_the_deadline_are_moved(world, jobs, settings):
    register(world, labels={"pool": "fresh"})
    job = submit(world, node_selector={"pool": "fresh"})
    jobs.run()
    world.client(world.staff).delete(f"{NODES}a100-9/")
    settings.TRAINYARD_REPAIR_DRAIN_SECONDS = 3600

    remove_drained_nodes(timezone.now() + timedelta(seconds=3599))
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    remove_drained_nodes(timezone.now() + timedelta(seconds=3601))

    job.refresh_from_db()
    assert (job.status, job.stop_outcome) == (JobStatus.PAUSING, StopOutcome.MOVED)
    assert "removed from the cluster" in job.repair_message


def test_a_backend_that_discovers_its_nodes_refuses_a_removal(world, settings):
    settings.TRAINYARD_BACKEND = "kubernetes"

    answer = world.client(world.staff).delete(f"{NODES}a100-1/")

    assert answer.status_code == 409
    assert "kubectl delete node" in answer.json()["detail"]
    assert Node.objects.filter(name="a100-1").exists()


# --- a node not reported yet is not a failed node -----------------------------------------


def test_a_node_the_backend_has_never_reported_is_waited_for_not_failed(world, tmp_path):
    class NoNodes(LocalBackend):
        def nodes(self):
            return [node for node in registered_nodes() if node.name != "a100-9"]

    register(world)
    sync_nodes(NoNodes(tmp_path / "state", tmp_path / "logs", cgroup_root=None))
    fresh = Node.objects.get(name="a100-9")
    assert (fresh.ready, fresh.ready_reason) == (
        False,
        "the cluster backend has not reported this node yet",
    )

    facts = [
        NodeFacts("a100-9", RepairState.IN_SERVICE, 8, None, False, fresh.ready_reason),
        NodeFacts("a100-1", RepairState.IN_SERVICE, 8, 1000.0, False, "NotReady"),
    ]
    observed = observe(load_rules(), facts, None, 1010.0)

    assert [(o.rule.name, o.node) for o in observed.observations] == [
        ("backend-not-ready", "a100-1")
    ]


# --- a node the backend reports and the database lacks ------------------------------------


def test_a_node_the_backend_reports_is_registered_and_shown_free(world, tmp_path):
    class OneMoreNode(LocalBackend):
        def nodes(self):
            return [
                *registered_nodes(),
                BackendNode("h100-1", "H100", 4, 96_000, 1024 * 1024, {"rack": "r9"}),
            ]

    changed = sync_nodes(OneMoreNode(tmp_path / "state", tmp_path / "logs", cgroup_root=None))

    assert "h100-1" in changed
    listed = world.client(world.member).get(f"{NODES}h100-1/").json()
    assert (listed["gpu_type"], listed["gpus"], listed["cpus"], listed["labels"]) == (
        "H100", 4, 96.0, {"rack": "r9"}
    )  # fmt: skip
    assert (listed["ready"], listed["gpus_free"]) == (True, 4)
    h100 = world.client(world.member).get("/api/v1/gpu-types/").json()
    assert {"name": "H100", "cpus_per_gpu": 24.0, "memory_per_gpu": 256 * 1024} in h100
