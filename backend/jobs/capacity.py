"""Cluster capacity: totals, use and fragmentation per GPU type, free resources per node."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from backend.clusters.models import Node
from backend.jobs.snapshot import load_cluster_state
from jobmanager.core import Resources
from jobmanager.core.placement import FreeNode


@dataclass(frozen=True)
class NodeCapacity:
    """A node's use and what is free on it, as the scheduler sees them: nothing is free
    on a node it would not place work on (cordoned, out of service, or not ready)."""

    node: Node
    in_pool: bool
    used: Resources
    free_gpus: int
    free_cpus: Decimal
    free_memory: int

    @classmethod
    def of(cls, node: Node, seen: FreeNode | None) -> NodeCapacity:
        if seen is None:  # registered after the cluster state was read
            return cls(node, False, Resources(), 0, Decimal(0), 0)
        free_millicpus = max(seen.free_millicpus, 0)
        used = Resources(
            gpus=node.gpus - len(seen.free_gpus),
            millicpus=max(int(node.cpus * 1000) - free_millicpus, 0),
            memory=max(node.memory - seen.free_memory, 0),
        )
        if not seen.state.schedulable:
            return cls(node, False, used, 0, Decimal(0), 0)
        free_cpus = Decimal(free_millicpus) / 1000
        return cls(node, True, used, len(seen.free_gpus), free_cpus, max(seen.free_memory, 0))


def node_capacities(nodes=None) -> list[NodeCapacity]:
    """Each node's capacity, from the scheduler's own state of the cluster (the nodes and
    running jobs a scheduling pass starts from)."""
    cluster = load_cluster_state()
    nodes = Node.objects.select_related("gpu_type") if nodes is None else nodes
    return [NodeCapacity.of(node, cluster.nodes.get(node.name)) for node in nodes]


def fragmentation(histogram: Counter) -> list[dict[str, int]]:
    """How many schedulable nodes have k free GPUs, for k from 0 to the most any has."""
    largest = max(histogram, default=0)
    return [{"free_gpus": free, "nodes": histogram.get(free, 0)} for free in range(largest + 1)]


def free_gpu_histograms(capacities: list[NodeCapacity]) -> dict[str, Counter]:
    """Per GPU type: schedulable nodes counted by their free GPUs."""
    histograms: dict[str, Counter] = {}
    for capacity in capacities:
        if capacity.in_pool:
            histograms.setdefault(capacity.node.gpu_type.name, Counter())[capacity.free_gpus] += 1
    return histograms


def cluster_summary() -> list[dict[str, object]]:
    """One row per GPU type: nodes, GPUs/CPUs/memory total, used and free, and a
    fragmentation histogram (how many schedulable nodes have k free GPUs)."""
    # Each row a JSON object whose sums change type at the end (Decimal CPUs to float).
    rows: dict[str, dict[str, Any]] = {}
    capacities = node_capacities()
    for capacity in capacities:
        node = capacity.node
        name = node.gpu_type.name
        row = rows.setdefault(
            name,
            {
                "gpu_type": name,
                "nodes": 0,
                "schedulable_nodes": 0,
                "gpus_total": 0,
                "gpus_used": 0,
                "gpus_free": 0,
                "cpus_total": Decimal(0),
                "cpus_used": Decimal(0),
                "memory_total": 0,
                "memory_used": 0,
            },
        )
        row["nodes"] += 1
        row["gpus_total"] += node.gpus
        row["gpus_used"] += capacity.used.gpus
        row["cpus_total"] += node.cpus
        row["cpus_used"] += Decimal(capacity.used.millicpus) / 1000
        row["memory_total"] += node.memory
        row["memory_used"] += capacity.used.memory
        if capacity.in_pool:
            row["schedulable_nodes"] += 1
            row["gpus_free"] += capacity.free_gpus
    histograms = free_gpu_histograms(capacities)
    summary = []
    for name, row in sorted(rows.items()):
        row["fragmentation"] = fragmentation(histograms.get(name, Counter()))
        row["cpus_total"] = float(row["cpus_total"])
        row["cpus_used"] = float(row["cpus_used"])
        summary.append(row)
    return summary
