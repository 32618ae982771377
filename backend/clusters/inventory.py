"""The registered nodes as a cluster backend's declared inventory: what the embedded
default (``TRAINYARD_LOCAL_NODES=registered``, as ``make run`` sets) runs jobs on, read
at every call, so that a node registered, relabelled or removed through the API is used
(or no longer) from the next job manager pass on, without a restart."""

from __future__ import annotations

from backend.clusters.models import Node
from backend.core.quantities import millicpus
from jobmanager.backends import BackendNode
from jobmanager.backends.local_host import DECLARED_LABEL

REGISTERED = "registered"


def registered_nodes() -> list[BackendNode]:
    """Every registered node, its GPUs declared (not discovered on hardware)."""
    return [
        BackendNode(
            name=node.name,
            gpu_type=node.gpu_type.name,
            gpus=node.gpus,
            millicpus=millicpus(node.cpus),
            memory=node.memory,
            labels=dict(node.labels) | {DECLARED_LABEL: "true"},
            declared=True,
        )
        for node in Node.objects.select_related("gpu_type").order_by("name")
    ]
