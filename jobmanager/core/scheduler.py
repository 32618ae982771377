"""One scheduling pass: from a snapshot to starts, preemptions and reasons to wait.

Two phases. First every VC's jobs that fit within its quota (guaranteed work) are placed,
preempting borrowers when that is the only way; then the rest (jobs beyond their VC's
quota and jobs their users marked preemptible) may borrow what is still idle, and run as
preemptible. Within a VC, jobs go by priority, then submission time, then the largest
gang first; a FIFO VC stops at the first job that cannot start, a runnable-first VC lets
smaller jobs by, unless the waiting job has waited past the starvation guard.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from jobmanager.core.placement import ClusterState
from jobmanager.core.snapshot import (
    NO_RESOURCES,
    Decisions,
    Policy,
    Preemption,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    Start,
    VcState,
    Wait,
)


def queue_order(job: QueuedJob) -> tuple:
    """Priority first, then submission time (kept by preempted jobs, which so come back at
    the head), then the largest gang among jobs submitted at the same instant."""
    return (-job.priority, job.queued_at, -job.shape.total.gpus, -job.shape.workers, job.id)


def preemption_order(job: RunningJob) -> tuple:
    """The first victims: lowest priority, then the most recently started."""
    return (job.priority, -job.started_at, job.id)


@dataclass
class _VcQueue:
    vc: VcState
    jobs: list[QueuedJob]
    blocker: QueuedJob | None = None  # the job that holds the queue back
    blocker_reason: str = ""


@dataclass
class _Pass:
    snapshot: Snapshot
    cluster: ClusterState
    decisions: Decisions = field(default_factory=Decisions)
    guaranteed_use: dict[tuple[str, str], Resources] = field(
        default_factory=lambda: defaultdict(Resources)
    )
    interactive_gpus: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # GPU type -> running jobs that can be preempted (not yet chosen as victims)
    borrowers: dict[str, list[RunningJob]] = field(default_factory=lambda: defaultdict(list))
    # GPU type -> jobs already being stopped, whose resources are about to come free
    releasing: dict[str, list[RunningJob]] = field(default_factory=lambda: defaultdict(list))


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide what starts, what is preempted and why everything else waits."""
    state = _Pass(snapshot, ClusterState.of(snapshot.nodes, snapshot.running, snapshot.placement))
    for job in snapshot.running:
        if not (job.preemptible or job.borrowing):
            state.guaranteed_use[job.vc, job.shape.gpu_type] += job.shape.total
        if job.interactive:
            state.interactive_gpus[job.vc] += job.shape.total.gpus
        if job.releasing:
            state.releasing[job.shape.gpu_type].append(job)
        elif job.can_be_preempted:
            state.borrowers[job.shape.gpu_type].append(job)
    for victims in state.borrowers.values():
        victims.sort(key=preemption_order)

    vcs = {vc.name: vc for vc in snapshot.vcs}
    by_vc: dict[str, list[QueuedJob]] = defaultdict(list)
    for job in snapshot.queued:
        if job.vc in vcs:
            by_vc[job.vc].append(job)
        else:
            state.decisions.waits.append(Wait(job.id, f"VC {job.vc} does not exist"))
    queues = [_VcQueue(vcs[name], sorted(jobs, key=queue_order)) for name, jobs in by_vc.items()]
    queues.sort(key=lambda queue: queue_order(queue.jobs[0]))

    deferred: list[tuple[_VcQueue, QueuedJob]] = []
    for queue in queues:
        open_in_phase_one = True
        for job in queue.jobs:
            if queue.blocker is not None or not open_in_phase_one:
                deferred.append((queue, job))  # judged in the second phase, in order
            elif job.preemptible or not _within_quota(state, queue.vc, job):
                deferred.append((queue, job))
                # Under FIFO nothing behind it may start before it is judged.
                open_in_phase_one = queue.vc.policy != Policy.FIFO
            else:
                _start_guaranteed(state, queue, job)

    deferred.sort(key=lambda item: queue_order(item[1]))
    for queue, job in deferred:
        _start_if_idle(state, queue, job)
    return state.decisions


# --- phase one: guaranteed work -----------------------------------------------------------


def _within_quota(state: _Pass, vc: VcState, job: QueuedJob) -> bool:
    quota = vc.quota.get(job.shape.gpu_type, NO_RESOURCES)
    used = state.guaranteed_use[vc.name, job.shape.gpu_type]
    return (used + job.shape.total).fits_in(quota)


def _interactive_refusal(state: _Pass, vc: VcState, job: QueuedJob) -> str:
    if not job.interactive or vc.max_interactive_gpus is None:
        return ""
    held = state.interactive_gpus[vc.name]
    if held + job.shape.total.gpus <= vc.max_interactive_gpus:
        return ""
    return (
        f"VC {vc.name} allows {vc.max_interactive_gpus} interactive GPUs and "
        f"{held} are in use; this job needs {job.shape.total.gpus}"
    )


def _start_guaranteed(state: _Pass, queue: _VcQueue, job: QueuedJob) -> None:
    refusal = _interactive_refusal(state, queue.vc, job)
    if refusal:
        _wait(state, queue, job, refusal)
        return
    placement = state.cluster.place(job.shape)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=False)
        return
    victims = _choose_victims(state, job)
    if victims is None:
        _wait(state, queue, job, state.cluster.explain_no_fit(job.shape))
        return
    for victim in victims:
        state.borrowers[victim.shape.gpu_type].remove(victim)
        state.decisions.preemptions.append(
            Preemption(
                victim.id,
                f"preempted so that job {job.id} of VC {queue.vc.name} gets its quota",
                for_job=job.id,
            )
        )
    # The beneficiary starts in a later pass, once the victims have let go; until then
    # nothing else may take what they hold, and the VC's quota counts the job as placed.
    state.guaranteed_use[queue.vc.name, job.shape.gpu_type] += job.shape.total
    if job.interactive:
        state.interactive_gpus[queue.vc.name] += job.shape.total.gpus
    count = f"{len(victims)} preempted job(s)" if victims else "the preempted jobs"
    _wait(
        state,
        queue,
        job,
        f"starts once {count} have released their GPUs",
        blocks=queue.vc.policy == Policy.FIFO,
    )


def _choose_victims(state: _Pass, job: QueuedJob) -> list[RunningJob] | None:
    """The fewest borrowers whose leaving lets the job fit, or None if none would do.

    Jobs already being stopped count as gone; the job claims them, so that two jobs do
    not count on the same GPUs.
    """
    cluster = state.cluster
    gpu_type = job.shape.gpu_type
    releasing = list(state.releasing[gpu_type])
    candidates = state.borrowers[gpu_type]
    reachable = cluster.free_gpus(gpu_type) + sum(
        victim.shape.total.gpus for victim in (*releasing, *candidates)
    )
    if reachable < job.shape.total.gpus:
        return None
    chosen: list[RunningJob] = []
    for gone in releasing:
        cluster.release(gone.placement)
    try:
        if not cluster.fits(job.shape):
            for candidate in candidates:
                cluster.release(candidate.placement)
                chosen.append(candidate)
                if cluster.fits(job.shape):
                    break
            else:
                return None
            # Keep back any victim the job turns out not to need.
            for candidate in reversed(chosen[:-1]):
                cluster.occupy(candidate.placement)
                if cluster.fits(job.shape):
                    chosen.remove(candidate)
                else:
                    cluster.release(candidate.placement)
        state.releasing[gpu_type].clear()
        return list(chosen)
    finally:
        for victim in chosen:
            cluster.occupy(victim.placement)
        for gone in releasing:
            cluster.occupy(gone.placement)


# --- phase two: borrowing idle capacity ---------------------------------------------------


def _start_if_idle(state: _Pass, queue: _VcQueue, job: QueuedJob) -> None:
    if queue.blocker is not None:
        state.decisions.waits.append(
            Wait(job.id, f"waits behind job {queue.blocker.id}: {queue.blocker_reason}")
        )
        return
    refusal = _interactive_refusal(state, queue.vc, job)
    if refusal:
        _wait(state, queue, job, refusal)
        return
    guaranteed = not job.preemptible and _within_quota(state, queue.vc, job)
    placement = state.cluster.place(job.shape)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=not guaranteed)
        return
    reason = state.cluster.explain_no_fit(job.shape)
    if not guaranteed and not job.preemptible:
        quota = queue.vc.quota.get(job.shape.gpu_type, NO_RESOURCES)
        used = state.guaranteed_use[queue.vc.name, job.shape.gpu_type]
        reason = (
            f"beyond VC {queue.vc.name}'s {job.shape.gpu_type} quota "
            f"({used.gpus} of {quota.gpus} GPUs in use) and no idle capacity to borrow: " + reason
        )
    _wait(state, queue, job, reason)


# --- shared -------------------------------------------------------------------------------


def _record_start(
    state: _Pass, vc: VcState, job: QueuedJob, placement: tuple, borrowing: bool
) -> None:
    state.decisions.starts.append(Start(job.id, placement, borrowing=borrowing))
    if not (borrowing or job.preemptible):
        state.guaranteed_use[vc.name, job.shape.gpu_type] += job.shape.total
    if job.interactive:
        state.interactive_gpus[vc.name] += job.shape.total.gpus


def _wait(
    state: _Pass, queue: _VcQueue, job: QueuedJob, reason: str, blocks: bool | None = None
) -> None:
    """Leave the job waiting; under FIFO, or past the starvation guard, it blocks its VC."""
    state.decisions.waits.append(Wait(job.id, reason))
    if blocks is None:
        starved = state.snapshot.now - job.queued_at >= state.snapshot.starvation_seconds
        blocks = queue.vc.policy == Policy.FIFO or starved
    if blocks and queue.blocker is None:
        queue.blocker = job
        policy = "FIFO" if queue.vc.policy == Policy.FIFO else "runnable first, starvation guard"
        queue.blocker_reason = f"first in VC {queue.vc.name}'s queue ({policy}): {reason}"
