"""Changes to the cluster's inventory: GPU types and nodes. A change that can let queued
jobs start asks the job manager for a pass once it is committed."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.contrib.auth.models import User
from django.db import transaction

from backend.clusters.extensions import node_removal
from backend.clusters.models import GpuType, Node
from backend.core.changes import save_changes
from backend.core.job_manager_triggers import (
    run_job_manager_after_commit as _job_manager_after_commit,
)
from jobmanager.backends.base import BackendNode


@transaction.atomic
def create_gpu_type(name: str, cpus_per_gpu: Decimal | float, memory_per_gpu: int) -> GpuType:
    """Add a GPU type (SKU) with its t-shirt size."""
    return GpuType.objects.create(
        name=name, cpus_per_gpu=cpus_per_gpu, memory_per_gpu=memory_per_gpu
    )


@transaction.atomic
def update_gpu_type(gpu_type: GpuType, changes: dict[str, object]) -> GpuType:
    """Change a GPU type's t-shirt size (CPU cores and memory per GPU) or its name; jobs
    already submitted keep the resources they asked for."""
    return save_changes(gpu_type, changes)


@transaction.atomic
def register_node(**fields: object) -> Node:
    """Add a node to the inventory; the job manager looks at what now fits."""
    node = Node.objects.create(**fields)
    _job_manager_after_commit()
    return node


@transaction.atomic
def register_reported_node(reported: BackendNode, ready: bool, seen_at: datetime) -> Node:
    """Register a node the cluster backend reports and the database lacks, with a GPU type
    of its name (made from the node's size per GPU when there is none yet). Called by the
    job manager's pass, which schedules onto it in the same pass."""
    units = max(reported.gpus, 1)
    gpu_type = GpuType.objects.filter(name=reported.gpu_type).first() or create_gpu_type(
        reported.gpu_type,
        cpus_per_gpu=reported.millicpus / 1000 / units,
        memory_per_gpu=reported.memory // units,
    )
    return Node.objects.create(
        name=reported.name,
        gpu_type=gpu_type,
        gpus=reported.gpus,
        cpus=reported.millicpus / 1000,
        memory=reported.memory,
        labels=reported.labels,
        ready=ready,
        last_heartbeat=seen_at,
        switch=reported.switch,
        rack=reported.rack,
    )


def record_node_readiness(node: Node, ready: bool, reason: str, heartbeat: datetime | None) -> bool:
    """Store what the cluster backend says of the node: ready or not (and why), seen at
    ``heartbeat``. The one writer of ``Node.ready``. Returns whether readiness changed."""
    Node.objects.filter(pk=node.pk).update(
        ready=ready, ready_reason=reason, last_heartbeat=heartbeat
    )
    return ready != node.ready


def record_reported_place(node: Node, reported: BackendNode) -> None:
    """The switch and rack the cluster backend reports (from node labels, or Slurm's
    topology) replace the node's; where it reports none, what a cluster admin set stays."""
    place = {"switch": reported.switch, "rack": reported.rack}
    changes = {
        name: value for name, value in place.items() if value and getattr(node, name) != value
    }
    if changes:
        Node.objects.filter(pk=node.pk).update(**changes)


@transaction.atomic
def update_node(node: Node, changes: dict[str, object]) -> Node:
    """Change a node's settings; the job manager looks at what now fits."""
    save_changes(node, changes)
    _job_manager_after_commit()
    return node


def cordon_node(node: Node) -> Node:
    """No new work lands on a cordoned node; what runs there keeps running."""
    return update_node(node, {"schedulable": False})


def uncordon_node(node: Node) -> Node:
    return update_node(node, {"schedulable": True})


def remove_node(node: Node, actor: User | None = None) -> bool:
    """Remove the node now if no job runs there (True); else cordon it to drain (False):
    it goes once its jobs have ended, moved to other nodes after the drain deadline. The
    job manager's app does it (backend/jobmanager/removal.py, registered on node_removal).
    ActionRefused where the cluster backend discovers its nodes itself."""
    return node_removal.function(node, actor)
