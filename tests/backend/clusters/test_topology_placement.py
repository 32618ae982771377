"""Whole nodes and network topology on the running system: a cluster admin sets each
node's switch through the nodes API (or the backend reports it); a job asks for whole
nodes or one switch through the jobs API (or its VC asks whole nodes of every distributed
job), the job manager places it so, and a job that cannot be yet says why it waits."""

from __future__ import annotations

import pytest

from backend.clusters.actions import record_reported_place
from backend.clusters.models import Node
from backend.jobs.models import Job, JobStatus
from backend.vcs.models import Quota
from jobmanager.backends.base import BackendNode
from jobmanager.backends.memory import MemoryBackend
from tests.backend.field_support import NodeFieldTests, VcFieldTests
from tests.backend.jobs_support import JobManager, submit

pytestmark = pytest.mark.django_db

NODES = "/api/v1/nodes/"
VCS = "/api/v1/vcs/"


@pytest.fixture
def jobs(tmp_path, settings, redis_namespace) -> JobManager:
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    return JobManager(MemoryBackend(log_dir=settings.TRAINYARD_LOG_DIR))


def place_in_network(world, node: str, **place):
    return world.client(world.staff).patch(f"{NODES}{node}/", place, format="json")


def submitted(world, user, **fields) -> Job:
    response = submit(world.client(user), **fields)
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def nodes_of(job: Job) -> set[str]:
    job.refresh_from_db()
    return {worker["node"] for worker in job.placement or ()}


def test_a_cluster_admin_sets_a_nodes_switch_and_rack_and_everyone_sees_them(world):
    response = place_in_network(world, "a100-1", switch="ib-leaf-1", rack="r12")

    assert response.status_code == 200, response.json()
    listed = world.client(world.member).get(NODES).json()["results"]
    shown = {node["name"]: (node["switch"], node["rack"]) for node in listed}
    assert shown["a100-1"] == ("ib-leaf-1", "r12")
    assert shown["a100-2"] == ("", "")


class TestOnlyClusterAdminsSetANodesSwitch(NodeFieldTests):
    field, value = "switch", "ib-leaf-1"
    expected = {"update": {"vc_admin": 403}}


class TestASwitchNameTooLongIsA400NamingTheField(NodeFieldTests):
    field, value = "switch", "s" * 101
    expected = {"update": {"cluster_admin": 400}}


def test_the_switch_the_backend_reports_replaces_the_nodes_and_none_keeps_it(world):
    node = Node.objects.get(name="a100-1")
    reported = BackendNode("a100-1", "A100", 8, 64_000, 512 * 1024, switch="leaf-7")
    record_reported_place(node, reported)
    assert Node.objects.get(name="a100-1").switch == "leaf-7"
    record_reported_place(Node.objects.get(name="a100-1"), BackendNode("a100-1", "A100", 8, 1, 1))
    assert Node.objects.get(name="a100-1").switch == "leaf-7"


def test_a_same_switch_job_runs_under_one_switch_or_waits_saying_why(world, jobs):
    switches = {"a100-1": "sw-a", "a100-2": "sw-a", "a100-3": "sw-b", "a100-4": "sw-b"}
    for name, switch in switches.items():
        assert place_in_network(world, name, switch=switch).status_code == 200
    gang = submitted(world, world.member, workers=2, gpus_per_worker=4, same_switch=True)
    jobs.run()
    assert len({switches[name] for name in nodes_of(gang)}) == 1

    # One 8-GPU node left free under each switch: a gang of two such waits, saying why.
    Node.objects.filter(name__in=["a100-1", "a100-3"]).update(labels={"pin": "yes"})
    Job.objects.filter(pk=gang.pk).update(status=JobStatus.FINISHED, placement=[])
    Quota.objects.filter(vc=world.vision, gpu_type=world.a100).update(
        gpus=32, cpus=10_000, memory=10**9
    )
    for _ in range(2):
        submitted(world, world.member, gpus_per_worker=8, node_selector={"pin": "yes"})
    jobs.run()
    wide = submitted(world, world.member, workers=2, gpus_per_worker=8, same_switch=True)
    jobs.run()
    wide.refresh_from_db()
    assert wide.status == JobStatus.QUEUED
    assert "under one network switch" in wide.insight_message, wide.insight_message
    assert world.client(world.member).get(f"/api/v1/jobs/{wide.job_id}/").json()["same_switch"]


def test_whole_nodes_by_the_jobs_flag_or_its_vcs_setting(world, jobs):
    small = submitted(world, world.member, gpus_per_worker=1)
    jobs.run()
    (shared,) = nodes_of(small)
    gang = submitted(world, world.member, workers=2, gpus_per_worker=2, whole_nodes=True)
    jobs.run()
    assert len(nodes_of(gang)) == 2 and shared not in nodes_of(gang)
    gang.refresh_from_db()
    assert [len(worker["gpus"]) for worker in gang.placement] == [8, 8]

    # nlp asks whole nodes of every distributed job; only one node is left empty.
    allowed = world.client(world.staff).patch(
        f"{VCS}nlp/", {"whole_nodes_for_distributed": True}, format="json"
    )
    assert allowed.status_code == 200, allowed.json()
    assert allowed.json()["whole_nodes_for_distributed"] is True
    nlp_gang = submitted(world, world.outsider, vc="nlp", workers=2, gpus_per_worker=1)
    jobs.run()
    nlp_gang.refresh_from_db()
    assert nlp_gang.status == JobStatus.QUEUED
    assert "whole A100 nodes" in nlp_gang.insight_message


class TestOnlyTheVcsAdminsSetWholeNodesForItsDistributedJobs(VcFieldTests):
    field, value = "whole_nodes_for_distributed", True
    expected = {"update": {"other_vc_member": 404, "vc_admin": 200}}


class TestWholeNodesForDistributedIsTrueOrFalse(VcFieldTests):
    field, value = "whole_nodes_for_distributed", "always"
    expected = {"update": {"vc_admin": 400}}


def test_bad_whole_nodes_and_same_switch_are_a_400_naming_each_field(world):
    response = submit(world.client(world.member), whole_nodes="all", same_switch=[1])

    assert response.status_code == 400
    assert {"whole_nodes", "same_switch"} <= set(response.json())
