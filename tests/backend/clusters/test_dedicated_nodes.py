"""VC-dedicated nodes on the running system: a cluster admin binds nodes to a VC through
the nodes API; other VCs' jobs wait rather than run there, unless the VC lends its nodes
to preemptible work, which it then preempts to get its nodes back."""

from __future__ import annotations

import pytest

from backend.clusters.models import Node
from backend.jobs.models import Job, JobStatus
from jobmanager.backends.memory import MemoryBackend
from tests.backend.field_support import NodeFieldTests, VcFieldTests
from tests.backend.jobs_support import JobManager, submit

pytestmark = pytest.mark.django_db

NODES = "/api/v1/nodes/"


@pytest.fixture
def jobs(tmp_path, settings, redis_namespace) -> JobManager:
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    return JobManager(MemoryBackend(log_dir=settings.TRAINYARD_LOG_DIR))


def dedicate(world, node: str, vc: str | None):
    return world.client(world.staff).patch(f"{NODES}{node}/", {"dedicated_vc": vc}, format="json")


def submitted(world, user, **fields) -> Job:
    response = submit(world.client(user), **fields)
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def nodes_of(job: Job) -> set[str]:
    job.refresh_from_db()
    return {worker["node"] for worker in job.placement or ()}


def test_a_cluster_admin_binds_a_node_to_a_vc_and_everyone_sees_it(world):
    response = dedicate(world, "a100-1", "nlp")

    assert response.status_code == 200, response.json()
    assert Node.objects.get(name="a100-1").dedicated_vc == world.nlp
    listed = world.client(world.member).get(NODES).json()["results"]
    assert {node["name"]: node["dedicated_vc"] for node in listed}["a100-1"] == "nlp"
    assert dedicate(world, "a100-1", None).json()["dedicated_vc"] is None


@pytest.mark.parametrize("vc", ["no-such-vc", 12, ["nlp"]])
def test_binding_to_something_not_a_vc_is_a_400_naming_the_field(world, vc):
    response = dedicate(world, "a100-1", vc)

    assert response.status_code == 400
    assert list(response.json()) == ["dedicated_vc"]
    assert Node.objects.get(name="a100-1").dedicated_vc is None


class TestOnlyClusterAdminsBindNodes(NodeFieldTests):
    field, value = "dedicated_vc", "vision"
    expected = {"update": {"vc_admin": 403}}


class TestOnlyTheVcsAdminsLetItLendItsDedicatedNodes(VcFieldTests):
    field, value = "lends_dedicated_nodes", True
    expected = {"update": {"other_vc_member": 404, "vc_admin": 200}}


class TestLendingIsTrueOrFalse(VcFieldTests):
    field, value = "lends_dedicated_nodes", "often"
    expected = {"update": {"vc_admin": 400}}


def test_other_vcs_jobs_wait_rather_than_run_on_dedicated_nodes(world, jobs):
    for name in ("a100-1", "a100-2", "a100-3"):
        assert dedicate(world, name, "nlp").status_code == 200
    # Within vision's quota of 16, but only one 8-GPU node is left to it.
    vision_job = submitted(world, world.member, workers=2, gpus_per_worker=8)
    nlp_job = submitted(world, world.outsider, vc="nlp", workers=1, gpus_per_worker=8)

    jobs.run()

    vision_job.refresh_from_db()
    assert vision_job.status == JobStatus.QUEUED
    assert "others are dedicated to other VCs" in vision_job.insight_message
    assert len(nodes_of(nlp_job) & {"a100-1", "a100-2", "a100-3"}) == 1


def test_a_lending_vc_runs_others_preemptible_jobs_until_it_needs_its_nodes(world, jobs):
    for node in world.nodes[:4]:
        assert dedicate(world, node.name, "nlp").status_code == 200
    guest_body = {"workers": 4, "gpus_per_worker": 8, "preemptible": True}
    guest = submitted(world, world.member, **guest_body)
    jobs.run()
    assert refreshed_status(guest) == JobStatus.QUEUED  # nlp does not lend its nodes yet

    world.nlp.lends_dedicated_nodes = True
    world.nlp.save(update_fields=["lends_dedicated_nodes"])
    jobs.run()
    assert refreshed_status(guest) == JobStatus.RUNNING

    # nlp's own job (its quota is 8) takes a node back from the guest.
    own = submitted(world, world.outsider, vc="nlp", workers=1, gpus_per_worker=8)
    jobs.run()
    assert refreshed_status(guest) in (JobStatus.PAUSING, JobStatus.QUEUED)
    for _ in range(3):
        jobs.run()
    assert refreshed_status(own) == JobStatus.RUNNING


def refreshed_status(job: Job) -> str:
    job.refresh_from_db()
    return job.status
