"""The order of a VC's queue in a pass, by its policy: a rank before queue order
(priority, then submission, then the largest gang: jobmanager.core.queues.queue_order).

FIFO and runnable first rank nothing; backfill runs first the jobs with a deadline they
can still make (jobmanager.core.edf); least attained service ranks by LAS queue
(jobmanager.core.las) and within a queue by the user's usage; fair share by the user's usage
(jobmanager.core.fair_share). An overdue job (jobmanager.core.overdue) goes first under both.
"""

from __future__ import annotations

from typing import Any

from jobmanager.core.bursts import burst_rank
from jobmanager.core.edf import deadline_rank
from jobmanager.core.fair_share import fair_share_rank
from jobmanager.core.las import las_rank
from jobmanager.core.overdue import OVERDUE
from jobmanager.core.pass_state import PassState
from jobmanager.core.queues import queue_order
from jobmanager.core.snapshot import Policy, QueuedJob, VcState


def rank(state: PassState, vc: VcState, job: QueuedJob) -> tuple[Any, ...]:
    """A job's place in its VC's queue before its queue order, by the VC's policy."""
    if vc.policy == Policy.LAS:
        # Its LAS queue depends on the job and the snapshot only: once a job and pass.
        level = state.las_ranks.get(job.id)
        if level is None:
            level = state.las_ranks[job.id] = las_rank(state.snapshot, job, vc)
        if level == (OVERDUE,):
            return level
        return (*level, state.usage[(vc.name, job.user)])
    if vc.policy == Policy.FAIR_SHARE:
        return fair_share_rank(state, vc, job)
    if vc.policy == Policy.BACKFILL:
        if job.burst and job.due is None and state.snapshot.burst_service is not None:
            return burst_rank(job, state.snapshot)
        if job.due is None and state.snapshot.largest_fit_first:
            # A gang that fits now (a drained node or cluster) goes before the small
            # jobs that would take it, so that one drain serves several gangs.
            if state.cluster.fits(job.shape):
                return (1, 0, -job.shape.total.gpus, *queue_order(job))
            return (1, 1, *queue_order(job))
        return deadline_rank(job, state.snapshot.now)
    return ()


def rank_is_static(state: PassState, vc: VcState) -> bool:
    """Whether ``rank`` gives each job of the VC the same place for a whole pass: it
    depends only on the job and the snapshot, except under fair share and LAS (a user's
    usage grows with each start) and backfill's largest fit first (what fits now)."""
    if vc.policy.shares_fairly:
        return False
    return not (vc.policy == Policy.BACKFILL and state.snapshot.largest_fit_first)
