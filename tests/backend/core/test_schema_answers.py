"""The OpenAPI schema documents the answers as they really come: each answer below is
validated against its component, strictly (every documented field present unless
optional, no field the schema does not name, nulls only where it says nullable)."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.utils import timezone
from jsonschema import Draft4Validator

from backend.jobs.models import JobAttempt, JobStatus
from backend.repairs.models import NodeFault
from tests.backend.jobs_support import make_job

pytestmark = pytest.mark.django_db

GIB = 1024


def strict(node: object) -> object:
    """OpenAPI 3.0 schemas as JSON Schema: ``nullable`` as a null alternative, and objects
    closed to properties they do not name."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: strict(value) for key, value in node.items()}
    if "properties" in node and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


@pytest.fixture
def components(anonymous) -> dict:
    response = anonymous.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return strict(copy.deepcopy(response.json()["components"]))


def problems(components: dict, name: str, answer: object) -> list[str]:
    validator = Draft4Validator({"$ref": f"#/components/schemas/{name}", "components": components})
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(answer)
    ]


@pytest.fixture
def busy(world):
    """A running job with an environment, labels, a port and an attempt; a queued one; an
    open fault on a node."""
    running = make_job(
        world, status=JobStatus.RUNNING, gpus_per_worker=4, cpus_per_worker=16,
        memory_per_worker=4 * GIB, env={"LR": "0.1"}, node_selector={"zone": "b"},
        ports=[{"name": "jupyter", "port": 8888}],
        placement=[{"node": "a100-1", "gpus": [0, 1, 2, 3], "cpus": 16, "memory": 4 * GIB}],
    )  # fmt: skip
    JobAttempt.objects.create(
        job=running, number=1, nodes=["a100-1"], gpus=[{"node": "a100-1", "gpus": [0, 1, 2, 3]}],
        started_at=timezone.now() - timedelta(hours=2),
    )  # fmt: skip
    make_job(world, status=JobStatus.QUEUED, gpus_per_worker=8)
    NodeFault.objects.create(
        node=world.nodes[1], rule="gpu-xid", fault="GPU 3 fell off the bus", severity="critical",
        action="drain",
    )  # fmt: skip
    return running


@pytest.mark.parametrize(
    ("who", "path", "component"),
    [
        ("member", "/api/v1/usage/gpu-hours/?group_by=user", "GpuHours"),
        ("staff", "/api/v1/usage/gpu-hours/?group_by=vc&bucket=day", "GpuHours"),
        ("member", "/api/v1/cluster/summary/", "ClusterSummary"),
        ("member", "/api/v1/cluster/vc-usage/", "VcUsage"),
        ("member", "/api/v1/vcs/vision/", "VirtualClusterDetail"),
        ("member", "/api/v1/me/", "Me"),
        ("member", "/api/v1/jobs/{job}/", "JobDetail"),
        ("member", "/api/v1/node-repairs/a100-2/", "NodeRepairDetail"),
    ],
)
def test_an_answer_is_what_its_schema_component_says(
    world, busy, components, settings, who, path, component
):
    settings.TRAINYARD_PROMETHEUS_URL = ""  # GPU-hours without utilisation: used is null
    response = world.client(getattr(world, who)).get(path.format(job=busy.job_id))

    assert response.status_code == 200, response.content
    assert problems(components, component, response.json()) == []


def test_a_jobs_attempts_and_a_batch_action_are_what_the_schema_says(world, busy, components):
    client = world.client(world.member)

    attempts = client.get(f"/api/v1/jobs/{busy.job_id}/attempts/").json()
    batch = client.post(
        "/api/v1/jobs/batch/", {"action": "kill", "ids": [busy.job_id, "nosuchjob"]}, format="json"
    ).json()

    assert attempts and all(problems(components, "JobAttempt", row) == [] for row in attempts)
    assert [result["ok"] for result in batch["results"]] == [True, False]
    assert problems(components, "JobBatchResult", batch) == []


def test_the_strict_check_catches_an_undocumented_field(world, components):
    answer = world.client(world.member).get("/api/v1/cluster/vc-usage/").json()
    answer["vcs"][0]["borrowed_gpus"] = 0

    assert problems(components, "VcUsage", answer) == [
        "vcs/0: Additional properties are not allowed ('borrowed_gpus' was unexpected)"
    ]
