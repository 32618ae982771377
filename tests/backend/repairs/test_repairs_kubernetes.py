"""The repair manager with the Kubernetes backend (the fake API server): a node taken out
of service is cordoned in Kubernetes too, and uncordoned when it returns.

Prometheus's answers are given here (a healthy cluster with one failing GPU); the real
Prometheus path is in test_repairs_live.py.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from backend.clusters.models import Node, RepairState
from backend.jobs.models import JobStatus, StopOutcome
from backend.repairs.actions import move_node
from backend.repairs.manager import repair_pass
from jobmanager.backends.kubernetes import KubernetesBackend
from repairmanager.prometheus import Sample
from repairmanager.rules import load_rules
from tests.backend.jobs_support import JobManager, make_job

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fake"]

NAMESPACE = "trainyard-jobs"
RULES = load_rules()


@pytest.fixture
def backend(fake_kubernetes, fake_api_client, world, settings, tmp_path, monkeypatch):
    from tests.k8s_fake import fake_settings

    for node in world.nodes:
        fake_kubernetes.add_node(
            node.name, gpus=node.gpus, cpu=str(node.cpus), memory=f"{node.memory}Mi",
            labels={"trainyard.io/gpu-type": node.gpu_type.name},
        )  # fmt: skip
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    backend = KubernetesBackend(
        fake_settings(NAMESPACE), api_client=fake_api_client, watch_nodes=False
    )
    monkeypatch.setattr("backend.clusters.backends.get_backend", lambda: backend)
    yield backend
    backend.node_watcher.stop()


def prometheus(world, ecc_on: str | None):
    """Every A100 GPU reporting; a double-bit ECC error on GPU 5 of ``ecc_on``."""

    def query(promql: str) -> list[Sample]:
        if promql.startswith("count by"):
            return [Sample({"Hostname": n.name}, n.gpus) for n in world.nodes if n.gpus]
        if "ECC_DBE" in promql and ecc_on:
            return [Sample({"Hostname": ecc_on, "gpu": "5"}, 1)]
        return []

    return query


def test_a_node_out_of_service_is_cordoned_in_kubernetes_until_it_returns(
    world, backend, fake_kubernetes, settings, redis_namespace, django_capture_on_commit_callbacks
):
    settings.TRAINYARD_REPAIR_MAX_OUT_SHARE = 0.5
    job = make_job(world, gpus_per_worker=8, image="nvcr.io/nvidia/pytorch:24.08-py3")
    JobManager(backend).run()
    job.refresh_from_db()
    node = job.placement[0]["node"]

    with django_capture_on_commit_callbacks(execute=True):
        summary = repair_pass(RULES, prometheus(world, ecc_on=node), timezone.now())
    assert summary.taken_out == [node]
    assert fake_kubernetes.get("nodes", node)["spec"]["unschedulable"] is True
    job.refresh_from_db()
    assert (job.status, job.stop_outcome) == (JobStatus.PAUSING, StopOutcome.MOVED)

    with django_capture_on_commit_callbacks(execute=True):
        for state in (RepairState.READY_FOR_REPAIR, RepairState.IN_REPAIR):
            move_node(Node.objects.get(name=node), state, "by hand")
        move_node(Node.objects.get(name=node), RepairState.AFTER_REPAIR, "GPU 5 swapped")
        summary = repair_pass(RULES, prometheus(world, ecc_on=None), timezone.now())
    assert summary.returned == [node]
    assert not fake_kubernetes.get("nodes", node)["spec"].get("unschedulable")
