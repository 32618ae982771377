"""Changes to the cluster's inventory: GPU types and nodes."""

from __future__ import annotations

from backend.clusters.models import GpuType, Node


def create_gpu_type(name: str, cpus_per_gpu: object, memory_per_gpu: int) -> GpuType:
    return GpuType.objects.create(
        name=name, cpus_per_gpu=cpus_per_gpu, memory_per_gpu=memory_per_gpu
    )


def register_node(**fields: object) -> Node:
    return Node.objects.create(**fields)


def update_node(node: Node, changes: dict[str, object]) -> Node:
    for name, value in changes.items():
        setattr(node, name, value)
    node.save(update_fields=list(changes))
    return node


def cordon_node(node: Node) -> Node:
    """No new work lands on a cordoned node; what runs there keeps running."""
    return update_node(node, {"schedulable": False})


def uncordon_node(node: Node) -> Node:
    return update_node(node, {"schedulable": True})
