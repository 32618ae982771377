"""VC-dedicated nodes (DLTS's "VC machine hard assignment").

A cluster admin binds nodes to a VC (NodeState.dedicated_to). Only that VC's jobs run
there, and, where the VC lends its dedicated nodes (VcState.lends_dedicated), other VCs'
jobs their users marked preemptible: those run as preemptible anywhere, so the VC's own
guaranteed work takes the nodes back by preempting them. Nodes bound to no VC stay open
to every job. A job's shape names the VCs whose nodes it may use (JobShape.pools); the
placement (jobmanager.core.placement) places no worker elsewhere.
"""

from __future__ import annotations

from dataclasses import replace

from jobmanager.core.snapshot import JobShape, NodeState, QueuedJob, Snapshot, VcState


def pools_for(vc: str, preemptible: bool, lenders: tuple[str, ...]) -> tuple[str, ...]:
    """The VCs whose dedicated nodes a job of ``vc`` may use: its own, and the lenders'
    when it runs preemptible."""
    if not preemptible:
        return (vc,)
    return tuple(sorted({vc, *lenders}))


def lenders(vcs: tuple[VcState, ...]) -> tuple[str, ...]:
    return tuple(sorted(vc.name for vc in vcs if vc.lends_dedicated))


def with_pools(
    job: QueuedJob,
    lending: tuple[str, ...],
    dedicated: frozenset[str],
    shapes: dict[tuple[JobShape, tuple[str, ...]], JobShape] | None = None,
) -> QueuedJob:
    """The job with its shape naming the dedicated nodes it may use (``lending``: the VCs
    that lend theirs; ``dedicated``: the VCs that have dedicated nodes, the only ones worth
    naming, so that most jobs stay as they are). ``shapes`` keeps the shapes made, so that
    jobs of one shape share one."""
    pools = tuple(vc for vc in pools_for(job.vc, job.preemptible, lending) if vc in dedicated)
    if job.shape.pools == pools:
        return job
    key = (job.shape, pools)
    shape = shapes.get(key) if shapes is not None else None
    if shape is None:
        shape = replace(job.shape, pools=pools)
        if shapes is not None:
            shapes[key] = shape
    return replace(job, shape=shape)


def dedicated_vcs(nodes: tuple[NodeState, ...]) -> frozenset[str]:
    return frozenset(node.dedicated_to for node in nodes if node.dedicated_to)


def snapshot_with_pools(snapshot: Snapshot) -> Snapshot:
    """The snapshot with each queued job's shape naming the dedicated nodes it may use;
    the snapshot itself where no node is dedicated (nothing to decide)."""
    dedicated = dedicated_vcs(snapshot.nodes)
    if not dedicated:
        return snapshot
    lending = lenders(snapshot.vcs)
    shapes: dict[tuple[JobShape, tuple[str, ...]], JobShape] = {}
    queued = tuple(with_pools(job, lending, dedicated, shapes) for job in snapshot.queued)
    return replace(snapshot, queued=queued)
