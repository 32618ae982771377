"""Why a gang cannot be placed now, in words a user understands (ClusterState's
explain_no_fit caches it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobmanager.core.snapshot import JobShape
from jobmanager.core.topology import topology_reason

if TYPE_CHECKING:
    from jobmanager.core.placement import ClusterState


def no_fit_reason(cluster: ClusterState, shape: JobShape) -> str:
    """Why the gang cannot be placed now, in words a user understands."""
    per_worker = shape.per_worker
    gpu_type = shape.gpu_type
    if gpu_type not in cluster.buckets:
        return f"no schedulable node has GPU type {gpu_type}"
    workers = f"{shape.workers} x " if shape.workers > 1 else ""
    if per_worker.gpus > cluster.capacity_gpus[gpu_type]:
        each = ", each on one node" if shape.workers > 1 else " on one node"
        return (
            f"needs {workers}{per_worker.gpus} {gpu_type}{each}; "
            f"the largest {gpu_type} node has {cluster.capacity_gpus[gpu_type]}"
        )
    if shape.node_selector and not any(
        node.matches(shape.node_selector)
        for bucket in cluster.buckets[gpu_type]
        for node in bucket.values()
    ):
        labels = ", ".join(f"{key}={value}" for key, value in shape.node_selector)
        return f"no schedulable {gpu_type} node has the labels {labels}"
    open_counts = _open_free_counts(cluster, shape)
    if open_counts == []:
        return f"every schedulable {gpu_type} node it may use is dedicated to another VC"
    topology = topology_reason(cluster, shape)
    if topology is not None:
        return topology
    if per_worker.gpus == 0:
        nodes = [node for bucket in cluster.buckets[gpu_type] for node in bucket.values()]
        most_cpu = max((node.free_millicpus for node in nodes), default=0)
        most_memory = max((node.free_memory for node in nodes), default=0)
        needs = (
            f"needs {workers}{per_worker.millicpus / 1000:g} CPUs and "
            f"{per_worker.memory} MiB on {gpu_type} nodes; "
        )
        if most_cpu < per_worker.millicpus:
            return needs + f"most free CPUs on one node: {most_cpu / 1000:g}"
        if most_memory < per_worker.memory:
            return needs + f"most free memory on one node: {most_memory} MiB"
        return needs + "no node has both free"
    separate = (
        " on separate nodes"
        if shape.workers > 1 and 2 * per_worker.gpus > cluster.capacity_gpus[gpu_type]
        else ""
    )
    if open_counts is None:
        largest = cluster.largest_free_block(gpu_type)
        counts = [(count, len(bucket)) for count, bucket in enumerate(cluster.buckets[gpu_type])]
    else:
        largest = max(open_counts)
        counts = [(count, 1) for count in open_counts]
    reason = (
        f"needs {workers}{per_worker.gpus} {gpu_type}{separate}; largest free block is {largest}"
    )
    if open_counts is not None:
        reason += " on the nodes it may use (others are dedicated to other VCs)"
    if largest >= per_worker.gpus:
        blocks = sum(nodes * (count // per_worker.gpus) for count, nodes in counts)
        if blocks < shape.workers:
            verb = "blocks are" if blocks != 1 else "block is"
            reason += f", and only {blocks} such {verb} free"
        else:
            reason += " but the CPU, memory or node labels it asks for are not free there"
    return reason


def _open_free_counts(cluster: ClusterState, shape: JobShape) -> list[int] | None:
    """Free GPUs of each schedulable node not dedicated to a VC the job may not use; None
    where no node is closed to it that way (every node may be counted)."""
    if not cluster.has_dedicated:
        return None
    pools = shape.pools
    counts = []
    closed = False
    for bucket in cluster.buckets[shape.gpu_type]:
        for node in bucket.values():
            dedicated_to = node.state.dedicated_to
            if dedicated_to and dedicated_to not in pools:
                closed = True
            else:
                counts.append(len(node.free_gpus))
    return counts if closed else None
