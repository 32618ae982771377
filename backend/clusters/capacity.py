"""Cluster capacity: totals, use and fragmentation per GPU type, free resources per node."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal

from backend.clusters.models import Node
from backend.jobs.usage import Resources, used_by_node


@dataclass(frozen=True)
class NodeCapacity:
    node: Node
    used: Resources

    @property
    def in_pool(self) -> bool:
        return self.node.schedulable and self.node.repair_state == "in_service"

    @property
    def free_gpus(self) -> int:
        return max(self.node.gpus - self.used.gpus, 0) if self.in_pool else 0

    @property
    def free_cpus(self) -> Decimal:
        return max(self.node.cpus - self.used.cpus, Decimal(0)) if self.in_pool else Decimal(0)

    @property
    def free_memory(self) -> int:
        return max(self.node.memory - self.used.memory, 0) if self.in_pool else 0


def node_capacities(nodes=None) -> list[NodeCapacity]:
    used = used_by_node()
    nodes = Node.objects.select_related("gpu_type") if nodes is None else nodes
    return [NodeCapacity(node, used.get(node.name, Resources())) for node in nodes]


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
    rows: dict[str, dict[str, object]] = {}
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
        row["cpus_used"] += capacity.used.cpus
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
