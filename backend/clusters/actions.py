"""Changes to the cluster's inventory: GPU types and nodes. A change that can let queued
jobs start asks the job manager for a pass once it is committed."""

from __future__ import annotations

from django.db import transaction

from backend.clusters.models import GpuType, Node


def _job_manager_after_commit() -> None:
    from backend.jobs.actions import run_job_manager_after_commit  # jobs import clusters

    run_job_manager_after_commit()


def create_gpu_type(name: str, cpus_per_gpu: object, memory_per_gpu: int) -> GpuType:
    return GpuType.objects.create(
        name=name, cpus_per_gpu=cpus_per_gpu, memory_per_gpu=memory_per_gpu
    )


@transaction.atomic
def register_node(**fields: object) -> Node:
    node = Node.objects.create(**fields)
    _job_manager_after_commit()
    return node


@transaction.atomic
def update_node(node: Node, changes: dict[str, object]) -> Node:
    for name, value in changes.items():
        setattr(node, name, value)
    node.save(update_fields=list(changes))
    _job_manager_after_commit()
    return node


def cordon_node(node: Node) -> Node:
    """No new work lands on a cordoned node; what runs there keeps running."""
    return update_node(node, {"schedulable": False})


def uncordon_node(node: Node) -> Node:
    return update_node(node, {"schedulable": True})
