"""The order of a VC's queue in a pass, by its policy: a rank before queue order
(priority, then submission, then the largest gang: jobmanager.core.queues.queue_order).

FIFO and runnable first rank nothing; backfill runs first the jobs with a deadline they
can still make (jobmanager.core.edf); least attained service ranks by LAS queue
(jobmanager.core.las) and within a queue by the user's usage; fair share by the user's usage
(jobmanager.core.fair_share). An overdue job (jobmanager.core.overdue) goes first under both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobmanager.core.bursts import burst_rank
from jobmanager.core.edf import deadline_rank
from jobmanager.core.fair_share import OVERDUE_RANK, fair_share_ranker
from jobmanager.core.las import las_queue_rank
from jobmanager.core.pass_state import PassState
from jobmanager.core.queues import queue_order
from jobmanager.core.snapshot import Policy, QueuedJob, VcState


def ranker(state: PassState, vc: VcState) -> Callable[[QueuedJob], tuple[Any, ...]]:
    """A job's place in its VC's queue before its queue order, by the VC's policy (the
    policy's ranking picked once a VC and pass, not once a job)."""
    if vc.policy == Policy.LAS:
        las_ranks, usage, is_overdue = state.las_ranks, state.usage, state.is_overdue
        snapshot, name = state.snapshot, vc.name

        def las(job: QueuedJob) -> tuple[Any, ...]:
            # Its LAS queue depends on the job and the snapshot only: once a job and pass.
            level = las_ranks.get(job.id)
            if level is None:
                level = las_ranks[job.id] = (
                    OVERDUE_RANK if is_overdue(job, vc) else las_queue_rank(snapshot, job)
                )
            if level == OVERDUE_RANK:
                return level
            return (*level, usage[(name, job.user)])

        return las
    if vc.policy == Policy.FAIR_SHARE:
        return fair_share_ranker(state, vc)
    if vc.policy == Policy.BACKFILL:
        snapshot = state.snapshot
        if snapshot.burst_service is None and not snapshot.largest_fit_first:
            now = snapshot.now
            return lambda job: deadline_rank(job, now)
        return lambda job: _backfill_rank(state, job)
    return lambda job: ()


def _backfill_rank(state: PassState, job: QueuedJob) -> tuple[Any, ...]:
    if job.burst and job.due is None and state.snapshot.burst_service is not None:
        return burst_rank(job, state.snapshot)
    if job.due is None and state.snapshot.largest_fit_first:
        # A gang that fits now (a drained node or cluster) goes before the small
        # jobs that would take it, so that one drain serves several gangs.
        if state.cluster.fits(job.shape):
            return (1, 0, -job.shape.total.gpus, *queue_order(job))
        return (1, 1, *queue_order(job))
    return deadline_rank(job, state.snapshot.now)


def rank_is_static(state: PassState, vc: VcState) -> bool:
    """Whether ``ranker`` gives each job of the VC the same place for a whole pass: it
    depends only on the job and the snapshot, except under fair share and LAS (a user's
    usage grows with each start) and backfill's largest fit first (what fits now)."""
    if vc.policy.shares_fairly:
        return False
    return not (vc.policy == Policy.BACKFILL and state.snapshot.largest_fit_first)
