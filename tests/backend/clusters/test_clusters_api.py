"""The cluster over REST: GPU types, nodes, cordoning, and the summary with fragmentation."""

from __future__ import annotations

import pytest

from backend.clusters.models import GpuType, Node
from backend.jobs.models import JobStatus
from tests.backend.resources import ANONYMOUS, ResourceTests
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

GPU_TYPES = "/api/v1/gpu-types/"
NODES = "/api/v1/nodes/"
SUMMARY = "/api/v1/cluster/summary/"
GIB = 1024

NEW_NODE = {"name": "a100-5", "gpu_type": "A100", "gpus": 8, "cpus": 64, "memory": "512Gi"}


def test_cluster_admins_resize_gpu_types(world):
    response = world.client(world.staff).patch(
        f"{GPU_TYPES}A100/", {"cpus_per_gpu": 10, "memory_per_gpu": "96Gi"}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert response.json() == {"name": "A100", "cpus_per_gpu": 10.0, "memory_per_gpu": 96 * GIB}
    a100 = GpuType.objects.get(name="A100")
    assert (a100.cpus_per_gpu, a100.memory_per_gpu) == (10, 96 * GIB)


@pytest.mark.parametrize(("memory", "mib"), [("80Gi", 80 * GIB), (81920, 80 * GIB)])
def test_cluster_admins_create_gpu_types(world, memory, mib):
    body = {"name": "H100", "cpus_per_gpu": 12, "memory_per_gpu": memory}

    response = world.client(world.staff).post(GPU_TYPES, body, format="json")

    assert response.status_code == 201, response.json()
    assert response.json() == {"name": "H100", "cpus_per_gpu": 12.0, "memory_per_gpu": mib}
    assert GpuType.objects.get(name="H100").memory_per_gpu == mib


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "A100", "cpus_per_gpu": 8, "memory_per_gpu": "64Gi"}, "name"),
        ({"name": "H100", "cpus_per_gpu": 0, "memory_per_gpu": "64Gi"}, "cpus_per_gpu"),
        ({"name": "H100", "cpus_per_gpu": 8, "memory_per_gpu": "lots"}, "memory_per_gpu"),
        ({"name": "H100", "cpus_per_gpu": 8, "memory_per_gpu": 0}, "memory_per_gpu"),
        ({"name": "H100", "cpus_per_gpu": 8, "memory_per_gpu": "1e30"}, "memory_per_gpu"),
    ],
)
def test_bad_gpu_types_are_refused(world, body, field):
    response = world.client(world.staff).post(GPU_TYPES, body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert GpuType.objects.count() == 2


def test_cluster_admins_register_nodes(world):
    body = NEW_NODE | {"labels": {"rack": "r12"}}

    response = world.client(world.staff).post(NODES, body, format="json")

    assert response.status_code == 201, response.json()
    node = Node.objects.get(name="a100-5")
    assert (node.gpu_type.name, node.gpus, node.memory, node.labels) == (
        "A100", 8, 512 * GIB, {"rack": "r12"},
    )  # fmt: skip
    assert node.schedulable


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gpu_type": "H100"}, "gpu_type"),
        ({"labels": ["rack", "r12"]}, "labels"),
        ({"labels": {"rack": 12}}, "labels"),
        ({"labels": {"x" * 64: "y"}}, "labels"),
        ({"memory": "lots"}, "memory"),
        ({"memory": "1e30"}, "memory"),
        ({"gpu_type": "cpu", "gpus": 8}, "gpus"),
        ({"gpus": 0}, "gpus"),
        ({"cpus": 0}, "cpus"),
        ({"name": "a100-1"}, "name"),
        ({"name": "Not A Slug"}, "name"),
    ],
)
def test_bad_nodes_are_refused(world, changes, field):
    response = world.client(world.staff).post(NODES, NEW_NODE | changes, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert Node.objects.count() == 6


def test_a_cpu_only_node_has_no_gpus(world):
    body = {"name": "cpu-3", "gpu_type": "cpu", "gpus": 0, "cpus": 32, "memory": "128Gi"}

    assert world.client(world.staff).post(NODES, body, format="json").status_code == 201


class ClusterUnchanged(ResourceTests):
    """A VC admin may not change the cluster; anonymous users may not read it."""

    def check(self, action, role, user, response, resource) -> None:
        assert GpuType.objects.get(name="A100").cpus_per_gpu == 8
        assert list(Node.objects.filter(labels__has_key="rack")) == []
        assert Node.objects.filter(schedulable=False).count() == 0
        assert (GpuType.objects.count(), Node.objects.count()) == (2, 6)


class TestGpuTypesRoleMatrix(ClusterUnchanged):
    url = GPU_TYPES
    expected = {"create": {"vc_admin": 403}, "update": {"vc_admin": 403}, "list": {ANONYMOUS: 401}}

    @pytest.fixture
    def resource(self, world):
        return world.a100

    def detail_url(self, gpu_type) -> str:
        return f"{GPU_TYPES}{gpu_type.name}/"

    def body(self, action, gpu_type):
        if action == "create":
            return {"name": "H100", "cpus_per_gpu": 8, "memory_per_gpu": "80Gi"}
        return {"cpus_per_gpu": 1} if action == "update" else None


class TestNodesRoleMatrix(ClusterUnchanged):
    url = NODES
    expected = {
        "create": {"vc_admin": 403},
        "update": {"vc_admin": 403},
        "cordon": {"vc_admin": 403},
        "list": {ANONYMOUS: 401},
    }

    @pytest.fixture
    def resource(self, world):
        return Node.objects.get(name="a100-1")

    def detail_url(self, node) -> str:
        return f"{NODES}{node.name}/"

    def body(self, action, node):
        return {"create": NEW_NODE, "update": {"labels": {"rack": "r1"}}}.get(action)


class TestSummaryRoleMatrix(ClusterUnchanged):
    url = SUMMARY
    expected = {"list": {ANONYMOUS: 401}}


def test_members_read_the_cluster(world):
    client = world.client(world.member)

    gpu_types = client.get(GPU_TYPES).json()
    nodes = client.get(NODES).json()["results"]

    assert [gpu_type["name"] for gpu_type in gpu_types] == ["A100", "cpu"]
    assert [(node["name"], node["gpus_free"]) for node in nodes][:2] == [
        ("a100-1", 8),
        ("a100-2", 8),
    ]


def test_cordon_and_uncordon_flip_schedulable(world):
    client = world.client(world.staff)

    cordoned = client.post(f"{NODES}a100-1/cordon/")
    listed = client.get(f"{NODES}a100-1/").json()
    uncordoned = client.post(f"{NODES}a100-1/uncordon/")

    assert (cordoned.status_code, cordoned.json()["schedulable"]) == (200, False)
    assert (listed["schedulable"], listed["gpus_free"]) == (False, 0)
    assert (uncordoned.status_code, uncordoned.json()["schedulable"]) == (200, True)
    assert Node.objects.get(name="a100-1").schedulable


def test_labels_are_changed_with_patch(world):
    response = world.client(world.staff).patch(
        f"{NODES}a100-1/", {"labels": {"rack": "r7", "ib": "hdr"}}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert Node.objects.get(name="a100-1").labels == {"rack": "r7", "ib": "hdr"}


def test_a_node_cannot_be_renamed(world):
    response = world.client(world.staff).patch(f"{NODES}a100-1/", {"name": "x"}, format="json")

    assert response.status_code == 200
    assert Node.objects.filter(name="a100-1").exists()


def occupy(world, node: str, gpus: int) -> None:
    JobFactory(
        owner=world.member, vc=world.vision, gpu_type=world.a100, status=JobStatus.RUNNING,
        gpus_per_worker=gpus, cpus_per_worker=4 * gpus, memory_per_worker=GIB * gpus,
        placement=[{"node": node, "gpus": list(range(gpus)), "cpus": 4 * gpus,
                    "memory": GIB * gpus}],
    )  # fmt: skip


def summary_row(world, gpu_type: str) -> dict:
    rows = world.client(world.member).get(SUMMARY).json()["gpu_types"]
    return next(row for row in rows if row["gpu_type"] == gpu_type)


def histogram(row: dict) -> dict[int, int]:
    return {
        bucket["free_gpus"]: bucket["nodes"] for bucket in row["fragmentation"] if bucket["nodes"]
    }


def test_summary_shows_totals_use_and_fragmentation(world):
    occupy(world, "a100-2", 4)
    occupy(world, "a100-3", 7)
    occupy(world, "a100-4", 8)
    JobFactory(vc=world.vision, gpu_type=world.a100, status=JobStatus.QUEUED, gpus_per_worker=8)

    row = summary_row(world, "A100")

    assert (row["nodes"], row["schedulable_nodes"]) == (4, 4)
    assert (row["gpus_total"], row["gpus_used"], row["gpus_free"]) == (32, 19, 13)
    assert (row["cpus_total"], row["cpus_used"]) == (256.0, 76.0)
    assert (row["memory_total"], row["memory_used"]) == (4 * 512 * GIB, 19 * GIB)
    assert row["fragmentation"] == [
        {"free_gpus": free, "nodes": 1 if free in (0, 1, 4, 8) else 0} for free in range(9)
    ]


def test_a_cordoned_nodes_gpus_are_not_free(world):
    occupy(world, "a100-2", 4)
    world.client(world.staff).post(f"{NODES}a100-1/cordon/")

    row = summary_row(world, "A100")

    assert (row["nodes"], row["schedulable_nodes"]) == (4, 3)
    assert (row["gpus_used"], row["gpus_free"]) == (4, 4 + 8 + 8)
    assert histogram(row) == {4: 1, 8: 2}


def test_a_node_that_is_not_ready_has_no_free_gpus(world):
    """Schedulable and in service, but the cluster backend reports it not ready: the
    scheduler places nothing there, so the dashboard shows none of its GPUs free."""
    occupy(world, "a100-2", 4)
    Node.objects.filter(name="a100-1").update(ready=False, ready_reason="kubelet stopped")
    node = Node.objects.get(name="a100-1")
    assert (node.schedulable, node.repair_state) == (True, "in_service")

    row = summary_row(world, "A100")
    listed = world.client(world.member).get(f"{NODES}a100-1/").json()

    assert (row["schedulable_nodes"], row["gpus_used"], row["gpus_free"]) == (3, 4, 4 + 8 + 8)
    assert histogram(row) == {4: 1, 8: 2}
    assert (listed["ready"], listed["gpus_free"]) == (False, 0)


def test_cpu_only_nodes_are_summarised_without_gpus(world):
    row = summary_row(world, "cpu")

    assert (row["nodes"], row["gpus_total"], row["cpus_total"]) == (2, 0, 64.0)
    assert row["fragmentation"] == [{"free_gpus": 0, "nodes": 2}]
