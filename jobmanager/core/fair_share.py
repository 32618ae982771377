"""Fair share between a VC's users: the user with the least decayed usage goes first
(under policy FS across the VC's queue; under LAS within each of its queues).

Past usage comes with the snapshot (decayed by the caller); what running jobs ran since
they started is added, and a job started in the pass counts as FAIR_SHARE_START_SECONDS
of its GPUs, so that one user's sweep does not take every start of a pass.

A job that has spent the wait limit queued in all (Snapshot.las_wait_limit, all its waits
after preemptions included) is *overdue*, as under least attained service: it goes before
every job that is not, whatever its user used, so that a heavy user's job waits about the
limit at most before it heads the queue (and gets backfill's reservation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobmanager.core.overdue import OVERDUE
from jobmanager.core.pass_state import PassState
from jobmanager.core.snapshot import QueuedJob, VcState

OVERDUE_RANK = (OVERDUE,)

# Fair share: a job started in this pass counts as this many seconds of its GPUs.
FAIR_SHARE_START_SECONDS = 3600.0


def load_usage(state: PassState) -> None:
    """Each (VC, user)'s usage at the start of the pass, if any VC shares fairly."""
    snapshot = state.snapshot
    if any(vc.policy.shares_fairly for vc in snapshot.vcs):
        for key, amount in snapshot.usage.items():
            state.usage[key] += amount
        summary, usage, now = state.summary, state.usage, snapshot.now
        starts = summary.gpu_starts
        for key, gpus in summary.gpus.items():
            if gpus or starts.get(key):  # else it ran nothing: 0.0, as if not given
                usage[key] += summary.ran(key, now)


def fair_share_ranker(state: PassState, vc: VcState) -> Callable[[QueuedJob], tuple[Any, ...]]:
    """A job's place in a fair-share VC's queue: first if overdue, else by its user's
    usage (least first)."""
    usage, is_overdue, name = state.usage, state.is_overdue, vc.name

    def fair_share_rank(job: QueuedJob) -> tuple[Any, ...]:
        if is_overdue(job, vc):
            return OVERDUE_RANK
        return (usage[(name, job.user)],)

    return fair_share_rank


def charge_start(state: PassState, vc: VcState, job: QueuedJob) -> None:
    """A job started in this pass counts against its user's share from now on."""
    if vc.policy.shares_fairly:
        state.usage[(vc.name, job.user)] += job.shape.total.gpus * FAIR_SHARE_START_SECONDS
