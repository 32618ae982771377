"""The simulated cluster: identical GPU nodes, VC quotas in proportion to offered load, and
the gang shape each trace job becomes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jobmanager.core.snapshot import JobShape, NodeState, Policy, Resources, VcState
from jobmanager.simulate.trace import Trace, TraceJob

# CPU and memory grow with GPUs, so that only GPUs decide where a job fits.
MILLICPUS_PER_GPU = 8_000
MEMORY_PER_GPU = 64 * 1024  # MiB


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int
    gpus_per_node: int = 8
    gpu_type: str = "A100"
    # Nodes under each network switch, in order of name (0: one flat network, no
    # switches known): gangs are placed under as few as they can (jobmanager.core.topology).
    nodes_per_switch: int = 0

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_states(self) -> tuple[NodeState, ...]:
        width = len(str(max(self.nodes - 1, 0)))
        capacity = per_gpu(self.gpus_per_node)
        per_switch = self.nodes_per_switch
        return tuple(
            NodeState(
                f"node{index:0{width}d}",
                self.gpu_type,
                capacity,
                switch=f"sw{index // per_switch}" if per_switch else "",
            )
            for index in range(self.nodes)
        )

    def shape(self, gpus: int) -> JobShape:
        """One worker for a job that fits on a node; otherwise a gang of whole nodes.

        A job larger than a node whose GPUs are not a whole number of nodes (12 on 8-GPU
        nodes) is rounded up to whole nodes, as gang schedulers allocate them.
        """
        if gpus <= self.gpus_per_node:
            return JobShape(self.gpu_type, 1, per_gpu(gpus))
        workers = math.ceil(gpus / self.gpus_per_node)
        return JobShape(self.gpu_type, workers, per_gpu(self.gpus_per_node))

    def fits(self, job: TraceJob) -> bool:
        """Whether the job could ever run here (its gang needs no more nodes than exist)."""
        return self.shape(job.gpus).workers <= self.nodes


def per_gpu(gpus: int) -> Resources:
    return Resources(gpus, gpus * MILLICPUS_PER_GPU, gpus * MEMORY_PER_GPU)


def nodes_for_load(trace: Trace, target_load: float, gpus_per_node: int = 8) -> int:
    """The fewest nodes on which the trace offers at most ``target_load`` of the GPUs.

    Offered load = the trace's GPU-seconds / (cluster GPUs x the span from its first
    submission to its last). The cluster is never smaller than the largest gang.
    """
    if not 0 < target_load <= 10:
        raise ValueError(f"target load must be in (0, 10], not {target_load}")
    largest = max((math.ceil(job.gpus / gpus_per_node) for job in trace.jobs), default=1)
    if trace.span <= 0:
        return max(largest, 1)
    gpus = trace.gpu_seconds / (target_load * trace.span)
    return max(largest, math.ceil(gpus / gpus_per_node), 1)


def offered_load(trace: Trace, cluster: ClusterSpec) -> float:
    if trace.span <= 0 or cluster.gpus == 0:
        return 0.0
    return trace.gpu_seconds / (cluster.gpus * trace.span)


def split_quotas(offered_by_vc: dict[str, float], gpus: int) -> dict[str, int]:
    """Every GPU of the cluster goes to some VC, in proportion to its offered GPU-seconds.

    Whole GPUs by largest remainder (ties to the VC named first), so quotas sum exactly to
    the cluster. Each VC is then guaranteed about its share of the load; when a VC is idle
    the others borrow its GPUs, and it preempts them when its own jobs come back.
    """
    names = sorted(offered_by_vc)
    if not names:
        return {}
    total = sum(offered_by_vc.values())
    if total <= 0:
        shares = {name: gpus / len(names) for name in names}
    else:
        shares = {name: gpus * offered_by_vc[name] / total for name in names}
    quotas = {name: math.floor(share) for name, share in shares.items()}
    left = gpus - sum(quotas.values())
    by_remainder = sorted(names, key=lambda name: (-(shares[name] - quotas[name]), name))
    for name in by_remainder[:left]:
        quotas[name] += 1
    return quotas


def vc_states(quotas: dict[str, int], cluster: ClusterSpec, policy: Policy) -> tuple[VcState, ...]:
    return tuple(
        VcState(name, quota={cluster.gpu_type: per_gpu(gpus)}, policy=policy)
        for name, gpus in sorted(quotas.items())
    )
