"""Backfill with reservations (EASY, as Slurm's sched/backfill) within a pass.

The VC's first job that cannot start gets a reservation at its earliest start, computed
from what holds resources by its expected end (jobmanager.core.reservations); a later job
may take what a reservation holds only if it is expected to end before the reservation's
shadow time. A shape that waits for a reservation is read at most BACKFILL_DEPTH more
times in a pass, looking for a job short enough.
"""

from __future__ import annotations

from collections.abc import Callable

from jobmanager.core.pass_state import PassState, VcQueue, others_holds
from jobmanager.core.reservations import EndsInOrder, Reservation, reserve
from jobmanager.core.snapshot import JobShape, QueuedJob, WorkerPlacement

# Jobs of a shape that waits for a reservation still read in one pass, looking for one
# short enough to backfill (as Slurm's bf_max_job_test bounds its backfill scan).
BACKFILL_DEPTH = 8


def place(state: PassState, shape: JobShape) -> tuple[WorkerPlacement, ...] | None:
    """Place a job of the shape in what is free and not reserved; a shape that does
    not fit is not tried again in the pass, and may be backfilled BACKFILL_DEPTH times."""
    if shape in state.unplaceable:
        return None
    placement = state.cluster.place(shape)
    if placement is None:
        state.unplaceable.add(shape)
        if state.reservations:
            state.backfill_budget.setdefault(shape, BACKFILL_DEPTH)
    return placement


def place_job(state: PassState, job: QueuedJob) -> tuple[WorkerPlacement, ...] | None:
    """Place the job; one expected to end before a reservation's shadow time may
    take what that reservation holds."""
    own = next((r for r in state.reservations if r.job.id == job.id), None)
    if own is not None:
        # Its own reservation holds nothing back from it.
        own.lift(state.cluster)
        state.reservations.remove(own)
        state.unplaceable.discard(job.shape)
        placement = state.cluster.place(job.shape)
        if placement is None:
            state.reservations.append(own)
            own.hold(state.cluster)
        return placement
    placement = place(state, job.shape)
    if placement is not None or not state.reservations:
        return placement
    budget = state.backfill_budget.get(job.shape, 0)
    if budget <= 0:
        return None
    held = sum(len(worker.gpus) for r in state.reservations for worker in r.held)
    if held < job.shape.per_worker.gpus:
        # Nothing held that it could take: no job of the shape starts in this pass.
        state.backfill_budget[job.shape] = 0
        return None
    state.backfill_budget[job.shape] = budget - 1
    now = state.snapshot.now
    lifted = [r for r in state.reservations if r.held and r.is_short(job.expected_duration, now)]
    if not lifted:
        return None
    for reservation in lifted:
        reservation.lift(state.cluster)
    placement = state.cluster.place(job.shape)
    for reservation in lifted:
        if placement is not None:
            reservation.gives_back(placement)
        reservation.hold(state.cluster)
    if placement is not None:
        note_end(state, job, placement)
    return placement


def dead_shapes(state: PassState) -> Callable[[JobShape], bool]:
    """Whether no job of a shape can start for the rest of the pass (phase two), asked of
    every stream head a walk reads: the pass's sets bound once."""
    if state.snapshot.explain:
        return lambda shape: False
    unplaceable, budget = state.unplaceable, state.backfill_budget
    return lambda shape: shape in unplaceable and budget.get(shape, 0) <= 0


def note_end(state: PassState, job: QueuedJob, placement: tuple[WorkerPlacement, ...]) -> None:
    """A job started in this pass holds its place until its expected end (or, with
    none, as a running job with none: see effective_end) for reservations."""
    now = state.snapshot.now
    duration = job.expected_duration if job.expected_duration is not None else 60.0
    state.started_ends.append((now + duration, placement))
    if state.ends is not None:
        state.ends.insert((now + duration, -len(state.started_ends), placement))


def running_ends(state: PassState) -> EndsInOrder:
    """What holds resources, in order of expected end (built once a pass, worked out as
    far as reservations read it): the running jobs not preempted in the pass
    (state.summary.ends), then the jobs it started."""
    if state.ends is None:
        ends = state.summary.ends.in_order(state.snapshot.now, state.preempted)
        for index, (end, placement) in enumerate(state.started_ends, 1):
            ends.insert((end, -index, placement))
        state.ends = ends
    return state.ends


def reserve_for(state: PassState, queue: VcQueue, job: QueuedJob) -> bool:
    """Give the job the VC's reservation; False if running jobs give no time to plan it
    by (it then blocks its VC as under FIFO)."""
    # Reservations never share what they hold: other VCs' holds, lifted while this VC's
    # guaranteed work is placed, are back while this one is planned.
    lifted = state.lifted
    if lifted is not None:
        others_holds(state, lifted, lift=False)
    try:
        reservation = reserve(state.cluster, job, running_ends(state), state.snapshot.now)
        if reservation is None:
            return False
        if isinstance(reservation, Reservation):  # else NEVER: nothing to keep
            queue.reservation = reservation
            state.reservations.append(reservation)
            reservation.hold(state.cluster)
        return True
    finally:
        if lifted is not None:
            others_holds(state, lifted, lift=True)
