"""One scheduling pass: from a snapshot to starts, preemptions and reasons to wait.

Two phases. First every VC's jobs that fit within its quota (guaranteed work) are placed,
preempting borrowers when that is the only way; then the rest (jobs beyond their VC's
quota and jobs their users marked preemptible) may borrow what is still idle, and run as
preemptible. Within a VC, jobs go by priority, then submission time, then the largest
gang first; a FIFO VC stops at the first job that cannot start, a runnable-first VC lets
smaller jobs by, unless the waiting job has waited past the starvation guard.

Preemption (the victims: see jobmanager.core.preemption). A guaranteed job that does not
fit claims a place made of free resources, those of jobs being stopped and those of the
fewest borrowers, which are preempted. It starts in a later pass, once they are gone:
meanwhile its place is kept (Decisions.claims, handed back as QueuedJob.reserved), nobody
else gets it, the next pass takes no further victims for it, and it holds nothing back.
A borrower that its own VC's quota now covers counts as guaranteed work, and a job does
not preempt its own VC's borrowers ahead of it: either would have the VC take its quota
back by starting the victim again. A job its user made preemptible never holds
guaranteed work back, even under FIFO.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from jobmanager.core.placement import ClusterState
from jobmanager.core.preemption import Borrowers, fewest_victims, preemption_order
from jobmanager.core.snapshot import (
    NO_RESOURCES,
    Decisions,
    JobShape,
    Policy,
    Preemption,
    QueuedJob,
    RunningJob,
    Snapshot,
    Start,
    VcState,
    Wait,
    WorkerPlacement,
)


def queue_order(job: QueuedJob) -> tuple:
    """Priority first, then submission time (kept by preempted jobs, which so come back at
    the head), then the largest gang among jobs submitted at the same instant."""
    shape = job.shape
    gpus = shape.per_worker.gpus * shape.workers
    return (-job.priority, job.queued_at, -gpus, -shape.workers, job.id)


@dataclass
class _VcQueue:
    vc: VcState
    jobs: list[QueuedJob]
    deferred: list[QueuedJob] = field(default_factory=list)  # to the second phase, in order
    blocker: QueuedJob | None = None  # the job that holds the queue back
    blocker_reason: str = ""


class QuotaUse:
    """What each VC's guaranteed work holds of each GPU type (GPUs, millicores, MiB)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], list[int]] = {}

    def add(self, vc: str, shape: JobShape, sign: int = 1) -> None:
        """Count the job (sign -1: no longer)."""
        held = self._held.setdefault((vc, shape.gpu_type), [0, 0, 0])
        per_worker, workers = shape.per_worker, shape.workers * sign
        held[0] += per_worker.gpus * workers
        held[1] += per_worker.millicpus * workers
        held[2] += per_worker.memory * workers

    def gpus(self, vc: str, gpu_type: str) -> int:
        return self._held.get((vc, gpu_type), (0, 0, 0))[0]

    def room_for(self, vc: VcState, shape: JobShape) -> bool:
        """Whether the VC's quota has room for the job besides its guaranteed work."""
        quota = vc.quota.get(shape.gpu_type, NO_RESOURCES)
        held = self._held.get((vc.name, shape.gpu_type), (0, 0, 0))
        per_worker, workers = shape.per_worker, shape.workers
        return (
            held[0] + per_worker.gpus * workers <= quota.gpus
            and held[1] + per_worker.millicpus * workers <= quota.millicpus
            and held[2] + per_worker.memory * workers <= quota.memory
        )


@dataclass
class _Pass:
    snapshot: Snapshot
    cluster: ClusterState
    borrowers: Borrowers
    decisions: Decisions = field(default_factory=Decisions)
    guaranteed_use: QuotaUse = field(default_factory=QuotaUse)
    interactive_gpus: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Free capacity and borrowers only shrink during a pass, so a shape that could not be
    # placed, or found no victims, cannot later in the same pass either.
    unplaceable: set[JobShape] = field(default_factory=set)
    no_victims: set[tuple[JobShape, str | None]] = field(default_factory=set)

    def starved(self, job: QueuedJob) -> bool:
        return self.snapshot.now - job.queued_at >= self.snapshot.starvation_seconds

    def place(self, shape: JobShape) -> tuple[WorkerPlacement, ...] | None:
        if shape in self.unplaceable:
            return None
        placement = self.cluster.place(shape)
        if placement is None:
            self.unplaceable.add(shape)
        return placement


def covered_borrowers(snapshot: Snapshot) -> set[str]:
    """Running jobs that started borrowing but that their VC's quota now covers (its other
    work has ended): they count as guaranteed and are not preempted, since the VC would
    at once take its quota back by starting them again. The highest priority and the
    longest running are covered first."""
    return _guaranteed_use(snapshot)[1]


def _guaranteed_use(snapshot: Snapshot) -> tuple[QuotaUse, set[str], set[str]]:
    """What guaranteed work holds of each VC's quota: running jobs, then queued jobs whose
    places were kept by the pass before (their claim comes first), then borrowers the
    rest of the quota covers. Also those borrowers, and those queued jobs."""
    vcs = {vc.name: vc for vc in snapshot.vcs}
    used = QuotaUse()
    for job in snapshot.running:
        if not (job.preemptible or job.borrowing):
            used.add(job.vc, job.shape)
    claimants: set[str] = set()
    reserved = [job for job in snapshot.queued if job.reserved and job.vc in vcs]
    for job in sorted(reserved, key=queue_order):
        if not job.preemptible and used.room_for(vcs[job.vc], job.shape):
            used.add(job.vc, job.shape)
            claimants.add(job.id)
    covered: set[str] = set()
    borrowers = [
        job
        for job in snapshot.running
        if job.borrowing and not (job.preemptible or job.releasing) and job.vc in vcs
    ]
    for job in sorted(borrowers, key=preemption_order, reverse=True):
        if used.room_for(vcs[job.vc], job.shape):
            used.add(job.vc, job.shape)
            covered.add(job.id)
    return used, covered, claimants


def schedule(snapshot: Snapshot, free: ClusterState | None = None) -> Decisions:
    """Decide what starts, what is preempted and why everything else waits.

    ``free``, if given, is the cluster's free capacity with the snapshot's running jobs
    taken, kept up to date by the caller (a simulation) between passes; the pass uses it
    in a trial and leaves it as it was. Without it, the pass builds it from the snapshot.
    """
    if free is None:
        return _schedule(
            snapshot, ClusterState.of(snapshot.nodes, snapshot.running, snapshot.placement)
        )
    with free.trial():
        return _schedule(snapshot, free)


def _schedule(snapshot: Snapshot, cluster: ClusterState) -> Decisions:
    used, covered, claimants = _guaranteed_use(snapshot)
    victims = [job for job in snapshot.running if job.can_be_preempted and job.id not in covered]
    state = _Pass(snapshot, cluster, Borrowers(victims), guaranteed_use=used)
    for job in snapshot.running:
        if job.interactive:
            state.interactive_gpus[job.vc] += job.shape.total.gpus

    vcs = {vc.name: vc for vc in snapshot.vcs}
    order: dict[str, tuple] = {}
    by_vc: dict[str, list[QueuedJob]] = defaultdict(list)
    for job in snapshot.queued:
        if job.vc in vcs:
            order[job.id] = queue_order(job)
            by_vc[job.vc].append(job)
        elif snapshot.explain:
            state.decisions.waits.append(Wait(job.id, f"VC {job.vc} does not exist"))
    queues = [
        _VcQueue(vcs[name], sorted(jobs, key=lambda job: order[job.id]))
        for name, jobs in by_vc.items()
    ]
    queues.sort(key=lambda queue: order[queue.jobs[0].id])

    # Places kept by the pass before go first to the jobs they were kept for: nothing
    # judged earlier in this pass may take them, so no further victims are needed.
    kept = [(queue, job) for queue in queues for job in queue.jobs if job.id in claimants]
    handled: set[str] = set()
    for queue, job in sorted(kept, key=lambda item: order[item[1].id]):
        if _take_kept_place(state, queue, job):
            handled.add(job.id)

    for queue in queues:
        _phase_one(state, queue, handled)
    _phase_two(state, queues, order)
    return state.decisions


def _phase_one(state: _Pass, queue: _VcQueue, handled: set[str]) -> None:
    """Start the VC's guaranteed work in order; defer the rest to the second phase."""
    jobs = queue.jobs
    for position, job in enumerate(jobs):
        if job.id in handled:
            continue
        if queue.blocker is not None:
            rest = jobs[position:]
            break
        if job.preemptible or not state.guaranteed_use.room_for(queue.vc, job.shape):
            queue.deferred.append(job)
            # Under FIFO, or once this job has waited past the starvation guard, nothing
            # behind it may start before it is judged. A job its user made preemptible
            # holds no guaranteed work back: it never could be any.
            if not job.preemptible and (queue.vc.policy == Policy.FIFO or state.starved(job)):
                rest = jobs[position + 1 :]
                break
        else:
            _start_guaranteed(state, queue, job)
    else:
        return
    # The rest is judged in the second phase, in order (or just waits behind a blocker).
    queue.deferred.extend(job for job in rest if job.id not in handled)


def _phase_two(state: _Pass, queues: list[_VcQueue], order: dict[str, tuple]) -> None:
    """Judge the deferred jobs of all VCs in one queue order, for idle capacity; a VC
    whose queue is held back is left alone from then on."""
    heap = []
    for index, queue in enumerate(queues):
        if queue.blocker is not None:
            _wait_behind_blocker(state, queue, queue.deferred)
        elif queue.deferred:
            heap.append((order[queue.deferred[0].id], index, 0))
    heapq.heapify(heap)
    while heap:
        _, index, position = heapq.heappop(heap)
        queue = queues[index]
        _start_if_idle(state, queue, queue.deferred[position])
        if queue.blocker is not None:
            _wait_behind_blocker(state, queue, queue.deferred[position + 1 :])
        elif position + 1 < len(queue.deferred):
            following = queue.deferred[position + 1]
            heapq.heappush(heap, (order[following.id], index, position + 1))


def _wait_behind_blocker(state: _Pass, queue: _VcQueue, jobs: list[QueuedJob]) -> None:
    if state.snapshot.explain:
        state.decisions.waits.extend(Wait(job.id, queue.blocker_reason) for job in jobs)


# --- phase one: guaranteed work -----------------------------------------------------------


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
    placement = state.place(job.shape)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=False)
        return
    victims = _choose_victims(state, job)
    if victims is None:
        _wait(state, queue, job, _explain(state, job))
        return
    kept = state.cluster.claim(job.shape, victims)
    if kept is None:
        raise RuntimeError(f"the victims chosen for job {job.id} do not make room for it")
    _keep_place(state, queue, job, kept, victims)


def _take_kept_place(state: _Pass, queue: _VcQueue, job: QueuedJob) -> bool:
    """Start the job in the place the pass before kept for it (its quota counted already),
    or keep that place again while jobs being stopped still hold part of it; False (and
    its quota no longer counted) if that place is not to be had."""
    if not _interactive_refusal(state, queue.vc, job):
        if state.cluster.take(job.reserved):
            _record_start(state, queue.vc, job, job.reserved, borrowing=False, counted=True)
            return True
        if state.cluster.claim(job.shape, (), exactly=job.reserved):
            _keep_place(state, queue, job, job.reserved, [], counted=True)
            return True
    state.guaranteed_use.add(queue.vc.name, job.shape, sign=-1)
    return False


def _keep_place(
    state: _Pass,
    queue: _VcQueue,
    job: QueuedJob,
    kept: tuple[WorkerPlacement, ...],
    victims: list[RunningJob],
    counted: bool = False,
) -> None:
    """The job starts in a later pass, once the victims (and the jobs being stopped) have
    let go; until then its place is kept, and the VC's quota counts it as placed."""
    state.decisions.claims[job.id] = kept
    for victim in victims:
        state.borrowers.remove(victim)
        state.decisions.preemptions.append(
            Preemption(
                victim.id,
                f"preempted so that job {job.id} of VC {queue.vc.name} gets its quota",
                for_job=job.id,
            )
        )
    if not counted:
        state.guaranteed_use.add(queue.vc.name, job.shape)
    if job.interactive:
        state.interactive_gpus[queue.vc.name] += job.shape.total.gpus
    # Its place being kept, it holds nothing back, even under FIFO: the jobs behind it
    # may claim their own places in the same pass.
    count = f"{len(victims)} preempted job(s)" if victims else "the jobs being stopped"
    _wait(state, queue, job, f"starts once {count} have released their GPUs", blocks=False)


def _choose_victims(state: _Pass, job: QueuedJob) -> list[RunningJob] | None:
    # Borrowers only get fewer during a pass, and a job spares only its own VC's jobs
    # ahead of it (more of them the later it comes in its VC's queue). So a failure holds
    # for the rest of the VC's jobs of the shape, and, if the VC had no borrowers to
    # spare, for every VC's.
    shape = job.shape
    if (shape, None) in state.no_victims or (shape, job.vc) in state.no_victims:
        return None
    victims = fewest_victims(state.cluster, state.borrowers, job)
    if victims is None:
        state.no_victims.add((shape, job.vc if state.borrowers.of_vc[job.vc] else None))
    return victims


# --- phase two: borrowing idle capacity ---------------------------------------------------


def _start_if_idle(state: _Pass, queue: _VcQueue, job: QueuedJob) -> None:
    refusal = _interactive_refusal(state, queue.vc, job)
    if refusal:
        _wait(state, queue, job, refusal)
        return
    guaranteed = not job.preemptible and state.guaranteed_use.room_for(queue.vc, job.shape)
    placement = state.place(job.shape)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=not guaranteed)
        return
    reason = _explain(state, job)
    if state.snapshot.explain and not guaranteed and not job.preemptible:
        quota = queue.vc.quota.get(job.shape.gpu_type, NO_RESOURCES)
        used = state.guaranteed_use.gpus(queue.vc.name, job.shape.gpu_type)
        reason = (
            f"beyond VC {queue.vc.name}'s {job.shape.gpu_type} quota "
            f"({used} of {quota.gpus} GPUs in use) and no idle capacity to borrow: " + reason
        )
    _wait(state, queue, job, reason)


# --- shared -------------------------------------------------------------------------------


def _record_start(
    state: _Pass,
    vc: VcState,
    job: QueuedJob,
    placement: tuple,
    borrowing: bool,
    counted: bool = False,
) -> None:
    state.decisions.starts.append(Start(job.id, placement, borrowing=borrowing))
    if not (borrowing or job.preemptible or counted):
        state.guaranteed_use.add(vc.name, job.shape)
    if job.interactive:
        state.interactive_gpus[vc.name] += job.shape.total.gpus


def _wait(
    state: _Pass, queue: _VcQueue, job: QueuedJob, reason: str, blocks: bool | None = None
) -> None:
    """Leave the job waiting; under FIFO, or past the starvation guard, it blocks its VC."""
    if state.snapshot.explain:
        state.decisions.waits.append(Wait(job.id, reason))
    if blocks is None:
        blocks = queue.vc.policy == Policy.FIFO or state.starved(job)
    if blocks and queue.blocker is None:
        queue.blocker = job
        policy = "FIFO" if queue.vc.policy == Policy.FIFO else "runnable first, starvation guard"
        queue.blocker_reason = (
            f"waits behind job {job.id}: first in VC {queue.vc.name}'s queue ({policy}): {reason}"
        )


def _explain(state: _Pass, job: QueuedJob) -> str:
    return state.cluster.explain_no_fit(job.shape) if state.snapshot.explain else ""
