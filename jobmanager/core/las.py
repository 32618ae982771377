"""Least attained service (Tiresias): a few discrete queues by attained GPU-time, with
preemption of preemptible work only.

A VC's jobs go by their LAS queue (jobmanager.core.queues.las_level); a job that waited
past the starvation guard and some times what it ran goes first again (Tiresias's
STARVE_LIMIT). A job that cannot start may preempt its VC's preemptible jobs of a later
queue that have run a quantum since they (re)started, so that jobs are not preempted
back and forth. With Snapshot.las_within_queue each queue is served in submission order,
preemptively: a job may also preempt the jobs of its own queue submitted after it, so
that a job moved down a queue gets its GPUs back from the jobs that reached that queue
while it waited, instead of waiting for them all to end.

With a wait limit (Snapshot.las_wait_limit), a job that has spent that long queued since
its submission, all its waits after preemptions included, is *overdue*: it goes before
every other job, with backfill's reservation, and preempts nothing; jobs that were
overdue when they started least attained service no longer preempts. So no job waits
much more than the limit and the running jobs' ends in all, however often it was
preempted. With
Snapshot.las_limit_preempted_only the limit binds only jobs that have run before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jobmanager.core.outcomes import preempt, wait
from jobmanager.core.overdue import OVERDUE, is_overdue, time_queued
from jobmanager.core.pass_state import PassState, VcQueue
from jobmanager.core.preemption import Borrowers, fewest_victims
from jobmanager.core.queues import las_level
from jobmanager.core.snapshot import QueuedJob, RunningJob, Snapshot, VcState

__all__ = [
    "OVERDUE",
    "is_overdue",
    "las_queue_rank",
    "las_rank",
    "preempt_for_less_attained",
    "time_queued",
]

# Jobs per VC and pass that look for LAS victims.
LAS_PREEMPTION_TRIES = 64


def las_rank(snapshot: Snapshot, job: QueuedJob, vc: VcState | None = None) -> tuple[Any, ...]:
    """A job's place in a LAS VC's queue: its queue by attained service, or first if it
    has waited too long."""
    if is_overdue(snapshot, job, vc):
        return (OVERDUE,)
    return las_queue_rank(snapshot, job)


def las_queue_rank(snapshot: Snapshot, job: QueuedJob) -> tuple[Any, ...]:
    """``las_rank`` of a job that is not overdue."""
    # Waited too long (past the guard, and some times what it ran: Tiresias's
    # STARVE_LIMIT): first again, whatever it ran.
    ran = job.attained / max(job.shape.total.gpus, 1)
    guard = max(snapshot.las_starvation_seconds, snapshot.las_starve_factor * ran)
    if snapshot.now - job.waiting_from >= guard:
        return (0,)
    return (las_level(job.attained, snapshot.las_thresholds),)


def _victims(
    state: PassState, queue: VcQueue, level: int, job: QueuedJob | None
) -> Iterator[RunningJob]:
    """The VC's preemptible jobs that have run a quantum since they (re)started and are in
    a later LAS queue than ``level`` or, given ``job``, in the same queue and submitted
    after it; never one that was overdue when it started."""
    snapshot = state.snapshot
    now, quantum, preempted, vc = snapshot.now, snapshot.las_quantum, state.preempted, queue.vc
    # The pass's caches read here directly: this asks them of each running job of the VC.
    overdue_ids, levels = state.was_overdue_ids, state.running_levels
    for running in state.summary.preemptible_of[vc.name].values():
        if running.id in preempted or now - running.started_at < quantum:
            continue
        was_overdue = overdue_ids.get(running.id)
        if was_overdue is None:
            was_overdue = state.was_overdue(running, vc)
        if was_overdue:
            continue
        running_level = levels.get(running.id)
        if running_level is None:
            running_level = state.running_level(running)
        if running_level > level or (
            job is not None
            and running_level == level
            and (-running.priority, running.queue_position) > (-job.priority, job.queued_at)
        ):
            yield running


def preempt_for_less_attained(state: PassState, queue: VcQueue, job: QueuedJob) -> bool:
    """Least attained service: make room for the job, unless it is overdue, by preempting
    its VC's preemptible jobs of a later LAS queue (or, with las_within_queue, of its own
    queue and submitted after it) that have run a quantum since they (re)started; True if
    a place is kept for it."""
    if queue.las_tries >= LAS_PREEMPTION_TRIES:
        return False
    if is_overdue(state.snapshot, job, queue.vc):
        # Overdue: it goes first and keeps its place by a reservation, so the running
        # jobs' ends bound its wait; preempting for it moved that wait onto its victims,
        # which soon waited past the limit in turn (Philly, every job preemptible: mean
        # time queued 1.12x fair share's, 1.08x without).
        return False
    queue.las_tries += 1
    # By what it ran, not where waiting moved it: a job let ahead for having waited
    # past the starvation guard takes what is free first, and keeps its place by a
    # reservation, but preempts only as its queue would. An overdue job that preempted
    # any job that had run a quantum made victims that, once overdue in turn, preempted
    # others: on a congested cluster (cluster02, Philly: most waits past the limit) work
    # was lost and gangs drained over and over, 1.44-1.53x the best mean wait.
    snapshot = state.snapshot
    level = las_level(job.attained, snapshot.las_thresholds)
    pool = state.las_victims.get((queue.vc.name, level))
    if pool is None:
        pool = Borrowers(_victims(state, queue, level, job=None), snapshot.now)
        state.las_victims[(queue.vc.name, level)] = pool
    victims = fewest_victims(state.cluster, pool, job) if pool.held else []
    if not victims and snapshot.las_within_queue:
        # Its own queue is served in submission order: the jobs that reached it after
        # this one may make room too (a pool of this job's own, since it depends on it).
        victims = fewest_victims(
            state.cluster, Borrowers(_victims(state, queue, level, job), snapshot.now), job
        )
    if not victims:
        return False
    kept = state.cluster.claim(job.shape, victims)
    if kept is None:
        raise RuntimeError(f"the victims chosen for job {job.id} do not make room for it")
    state.decisions.claims[job.id] = kept
    preempt(
        state,
        victims,
        job,
        f"preempted by least attained service: job {job.id} of VC {queue.vc.name} has run less",
    )
    wait(
        state,
        queue,
        job,
        f"starts once {len(victims)} preempted job(s) have released their GPUs",
        blocks=False,
    )
    return True
