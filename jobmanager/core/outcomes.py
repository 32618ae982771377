"""What a pass decides for one job: it starts, its victims are preempted and its place
kept, or it waits (blocking its VC under FIFO, or with a reservation under backfill)."""

from __future__ import annotations

from datetime import UTC, datetime

from jobmanager.core.backfill import note_end, reserve_for
from jobmanager.core.fair_share import charge_start
from jobmanager.core.pass_state import PassState, VcQueue
from jobmanager.core.snapshot import (
    Policy,
    Preemption,
    QueuedJob,
    RunningJob,
    Start,
    VcState,
    Wait,
    WorkerPlacement,
)


def interactive_refusal(state: PassState, vc: VcState, job: QueuedJob) -> str:
    if not job.interactive or vc.max_interactive_gpus is None:
        return ""
    held = state.interactive_gpus[vc.name]
    if held + job.shape.total.gpus <= vc.max_interactive_gpus:
        return ""
    return (
        f"VC {vc.name} allows {vc.max_interactive_gpus} interactive GPUs and "
        f"{held} are in use; this job needs {job.shape.total.gpus}"
    )


def record_start(
    state: PassState,
    vc: VcState,
    job: QueuedJob,
    placement: tuple[WorkerPlacement, ...],
    borrowing: bool,
    counted: bool = False,
) -> None:
    state.decisions.starts.append(Start(job.id, placement, borrowing=borrowing))
    if not (borrowing or job.preemptible or counted):
        state.guaranteed_use.add(vc.name, job.shape)
    if job.interactive:
        state.interactive_gpus[vc.name] += job.shape.total.gpus
    if borrowing:
        state.borrowed_gpus[vc.name] += job.shape.total.gpus
    charge_start(state, vc, job)
    note_end(state, job, placement)


def preempt(state: PassState, victims: list[RunningJob], job: QueuedJob, reason: str) -> None:
    if victims:
        state.ends = None  # what they hold is pending now: plan reservations afresh
    for victim in victims:
        state.borrowers.drop(victim)
        for pool in state.las_victims.values():
            pool.drop(victim)
        state.preempted.add(victim.id)
        state.decisions.preemptions.append(Preemption(victim.id, reason, for_job=job.id))


def keep_place(
    state: PassState,
    queue: VcQueue,
    job: QueuedJob,
    kept: tuple[WorkerPlacement, ...],
    victims: list[RunningJob],
    counted: bool = False,
) -> None:
    """The job starts in a later pass, once the victims (and the jobs being stopped) have
    let go; until then its place is kept, and the VC's quota counts it as placed."""
    state.decisions.claims[job.id] = kept
    preempt(
        state, victims, job, f"preempted so that job {job.id} of VC {queue.vc.name} gets its quota"
    )
    if not counted:
        state.guaranteed_use.add(queue.vc.name, job.shape)
    if job.interactive:
        state.interactive_gpus[queue.vc.name] += job.shape.total.gpus
    # Its place being kept, it holds nothing back, even under FIFO: the jobs behind it
    # may claim their own places in the same pass.
    count = f"{len(victims)} preempted job(s)" if victims else "the jobs being stopped"
    wait(state, queue, job, f"starts once {count} have released their GPUs", blocks=False)


def wait(
    state: PassState,
    queue: VcQueue,
    job: QueuedJob,
    reason: str,
    blocks: bool | None = None,
    reservable: bool = True,
) -> None:
    """Leave the job waiting. Under FIFO, or past RF's starvation guard, it blocks its VC;
    under the reserving policies the VC's first such job gets a reservation instead (or,
    if running jobs give no expected end to plan it by, blocks its VC)."""
    policy = queue.vc.policy
    if blocks is None:
        blocks = state.holds_queue(policy, job)
        if policy.reserves and reservable and queue.reservation is None:
            blocks = not reserve_for(state, queue, job)
        mine = queue.reservation
        if state.snapshot.explain and mine is not None and mine.job.id == job.id:
            when = datetime.fromtimestamp(mine.shadow, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            reason += f" (reserved: expected to start by {when})"
    if state.snapshot.explain:
        state.decisions.waits.append(Wait(job.id, reason))
    if blocks and queue.blocker is None:
        queue.blocker = job
        name = {Policy.FIFO: "FIFO", Policy.RF: "runnable first, starvation guard"}.get(
            policy, f"{policy.name.lower()}, no expected end to reserve by"
        )
        queue.blocker_reason = (
            f"waits behind job {job.id}: first in VC {queue.vc.name}'s queue ({name}): {reason}"
        )
