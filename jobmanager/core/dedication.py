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

from jobmanager.core.snapshot import QueuedJob, Snapshot, VcState


def pools_for(vc: str, preemptible: bool, lenders: tuple[str, ...]) -> tuple[str, ...]:
    """The VCs whose dedicated nodes a job of ``vc`` may use: its own, and the lenders'
    when it runs preemptible."""
    if not preemptible:
        return (vc,)
    return tuple(sorted({vc, *lenders}))


def lenders(vcs: tuple[VcState, ...]) -> tuple[str, ...]:
    return tuple(sorted(vc.name for vc in vcs if vc.lends_dedicated))


def with_pools(job: QueuedJob, lending: tuple[str, ...]) -> QueuedJob:
    """The job with its shape naming the dedicated nodes it may use (``lending``: the VCs
    that lend theirs)."""
    pools = pools_for(job.vc, job.preemptible, lending)
    if job.shape.pools == pools:
        return job
    return replace(job, shape=replace(job.shape, pools=pools))


def snapshot_with_pools(snapshot: Snapshot) -> Snapshot:
    """The snapshot with each queued job's shape naming the dedicated nodes it may use;
    the snapshot itself where no node is dedicated (nothing to decide)."""
    if not any(node.dedicated_to for node in snapshot.nodes):
        return snapshot
    lending = lenders(snapshot.vcs)
    return replace(snapshot, queued=tuple(with_pools(job, lending) for job in snapshot.queued))
