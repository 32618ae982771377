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

Backfill, least attained service and fair share (see jobmanager.core.reservations and
jobmanager.core.queues) replace runnable first's starvation guard by a reservation for
each VC's first job that cannot start: later jobs, of every VC's second phase, start now
only if they leave its place free in time. Least attained service orders a VC's jobs by
their LAS queue and lets a job preempt its VC's preemptible jobs of a later queue that
have run a quantum since they started; fair share orders them by their user's usage;
backfill runs first the jobs with a deadline they can still make, earliest first.
A pass reads queued jobs through a QueueBook, dropping whole streams of a shape that
cannot start, so that its cost follows the jobs it decides on rather than the queue.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from jobmanager.core.placement import ClusterState
from jobmanager.core.preemption import Borrowers, fewest_victims, preemption_order
from jobmanager.core.queues import QueueBook, Walk, las_level, queue_order
from jobmanager.core.reservations import NEVER, Reservation, effective_end, reserve
from jobmanager.core.running import QuotaUse, RunningSummary
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

__all__ = ["QueueBook", "covered_borrowers", "queue_order", "schedule"]

# Jobs of a shape that waits for a reservation still read in one pass, looking for one
# short enough to backfill (as Slurm's bf_max_job_test bounds its backfill scan).
BACKFILL_DEPTH = 8
# Jobs per VC and pass that look for LAS victims.
LAS_PREEMPTION_TRIES = 64
# Fair share: a job started in this pass counts as this many seconds of its GPUs.
FAIR_SHARE_START_SECONDS = 3600.0


@dataclass
class _VcQueue:
    vc: VcState
    blocker: QueuedJob | None = None  # the job that holds the queue back
    blocker_reason: str = ""
    dead: set[JobShape] = field(default_factory=set)  # shapes phase one gave up on
    reservation: Reservation | None = None
    las_tries: int = 0


@dataclass
class _Pass:
    snapshot: Snapshot
    cluster: ClusterState
    borrowers: Borrowers
    book: QueueBook
    decisions: Decisions = field(default_factory=Decisions)
    guaranteed_use: QuotaUse = field(default_factory=QuotaUse)
    interactive_gpus: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Free capacity and borrowers only shrink during a pass, so a shape that could not be
    # placed, or found no victims, cannot later in the same pass either.
    unplaceable: set[JobShape] = field(default_factory=set)
    no_victims: set[tuple[JobShape, str | None]] = field(default_factory=set)
    judged: set[str] = field(default_factory=set)  # decided in phase one
    reservations: list[Reservation] = field(default_factory=list)
    # Shapes that wait for a reservation: jobs left to read for one short enough.
    backfill_budget: dict[JobShape, int] = field(default_factory=dict)
    # What holds resources, by expected end, for reservations (built when first needed).
    ends: list[tuple[float, int, tuple[WorkerPlacement, ...]]] | None = None
    preempted: set[str] = field(default_factory=set)
    started_ends: list[tuple[float, tuple[WorkerPlacement, ...]]] = field(default_factory=list)
    usage: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    borrowed_gpus: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    las_victims: dict[tuple[str, int], Borrowers] = field(default_factory=dict)
    lifted: _VcQueue | None = None  # whose phase one runs with other VCs' holds lifted
    summary: RunningSummary = field(default_factory=RunningSummary)

    def starved(self, job: QueuedJob) -> bool:
        return self.snapshot.now - job.queued_at >= self.snapshot.starvation_seconds

    def place(self, shape: JobShape) -> tuple[WorkerPlacement, ...] | None:
        if shape in self.unplaceable:
            return None
        placement = self.cluster.place(shape)
        if placement is None:
            self.unplaceable.add(shape)
            if self.reservations:
                self.backfill_budget.setdefault(shape, BACKFILL_DEPTH)
        return placement

    def place_job(self, job: QueuedJob) -> tuple[WorkerPlacement, ...] | None:
        """Place the job; one expected to end before a reservation's shadow time may
        take what that reservation holds."""
        own = next((r for r in self.reservations if r.job.id == job.id), None)
        if own is not None:
            # Its own reservation holds nothing back from it.
            own.lift(self.cluster)
            self.reservations.remove(own)
            self.unplaceable.discard(job.shape)
            placement = self.cluster.place(job.shape)
            if placement is None:
                self.reservations.append(own)
                own.hold(self.cluster)
            return placement
        placement = self.place(job.shape)
        if placement is not None or not self.reservations:
            return placement
        budget = self.backfill_budget.get(job.shape, 0)
        if budget <= 0:
            return None
        held = sum(len(worker.gpus) for r in self.reservations for worker in r.held)
        if held < job.shape.per_worker.gpus:
            # Nothing held that it could take: no job of the shape starts in this pass.
            self.backfill_budget[job.shape] = 0
            return None
        self.backfill_budget[job.shape] = budget - 1
        now = self.snapshot.now
        lifted = [r for r in self.reservations if r.held and r.is_short(job.expected_duration, now)]
        if not lifted:
            return None
        for reservation in lifted:
            reservation.lift(self.cluster)
        placement = self.cluster.place(job.shape)
        for reservation in lifted:
            if placement is not None:
                reservation.gives_back(placement)
            reservation.hold(self.cluster)
        if placement is not None:
            self.note_end(job, placement)
        return placement

    def dead(self, shape: JobShape) -> bool:
        """Whether no job of this shape can start for the rest of the pass (phase two)."""
        return (
            not self.snapshot.explain
            and shape in self.unplaceable
            and self.backfill_budget.get(shape, 0) <= 0
        )

    def note_end(self, job: QueuedJob, placement: tuple[WorkerPlacement, ...]) -> None:
        """A job started in this pass holds its place until its expected end (or, with
        none, as a running job with none: see effective_end) for reservations."""
        now = self.snapshot.now
        duration = job.expected_duration if job.expected_duration is not None else 60.0
        self.started_ends.append((now + duration, placement))
        if self.ends is not None:
            insort(self.ends, (now + duration, -len(self.started_ends), placement))

    def running_ends(self) -> list[tuple[float, int, tuple[WorkerPlacement, ...]]]:
        """What holds resources, in order of expected end (built once a pass)."""
        if self.ends is None:
            now = self.snapshot.now
            ends = []
            for job in self.snapshot.running:
                if job.releasing or job.id in self.preempted:
                    continue  # pending already: free for reservations
                ends.append((effective_end(job, now), len(ends), job.placement))
            for index, (end, placement) in enumerate(self.started_ends, 1):
                ends.append((end, -index, placement))
            ends.sort()
            self.ends = ends
        return self.ends

    def rank(self, vc: VcState, job: QueuedJob) -> tuple:
        """A job's place in its VC's queue before its queue order, by the VC's policy."""
        if vc.policy == Policy.LAS:
            # Waited too long (past the guard, and some times what it ran: Tiresias's
            # STARVE_LIMIT): first again, whatever it ran.
            ran = job.attained / max(job.shape.total.gpus, 1)
            guard = max(self.snapshot.starvation_seconds, self.snapshot.las_starve_factor * ran)
            if self.snapshot.now - job.waiting_from >= guard:
                return (0,)
            return (las_level(job.attained, self.snapshot.las_thresholds),)
        if vc.policy == Policy.FAIR_SHARE:
            return (self.usage[(vc.name, job.user)],)
        if vc.policy == Policy.BACKFILL:
            # Earliest deadline first among jobs that can still make theirs; the others
            # (none set, or out of reach) in queue order after them.
            due = job.due
            if due is not None and self.snapshot.now + (job.expected_duration or 0.0) <= due:
                return (0, due)
            return (1, *queue_order(job))
        return ()


def covered_borrowers(snapshot: Snapshot) -> set[str]:
    """Running jobs that started borrowing but that their VC's quota now covers (its other
    work has ended): they count as guaranteed and are not preempted, since the VC would
    at once take its quota back by starting them again. The highest priority and the
    longest running are covered first."""
    return _guaranteed_use(snapshot, _book(snapshot), RunningSummary.of(snapshot.running))[1]


def _book(snapshot: Snapshot) -> QueueBook:
    return QueueBook.of(snapshot.queued, snapshot.vcs, snapshot.las_thresholds)


def _guaranteed_use(
    snapshot: Snapshot, book: QueueBook, summary: RunningSummary
) -> tuple[QuotaUse, set[str], set[str]]:
    """What guaranteed work holds of each VC's quota: running jobs, then queued jobs whose
    places were kept by the pass before (their claim comes first), then borrowers the
    rest of the quota covers. Also those borrowers, and those queued jobs."""
    vcs = {vc.name: vc for vc in snapshot.vcs}
    used = summary.guaranteed.copy()
    claimants: set[str] = set()
    reserved = [job for job in book.reserved.values() if job.vc in vcs]
    for job in sorted(reserved, key=queue_order):
        if not job.preemptible and used.room_for(vcs[job.vc], job.shape):
            used.add(job.vc, job.shape)
            claimants.add(job.id)
    covered: set[str] = set()
    borrowers = [job for job in summary.borrowers.values() if job.vc in vcs]
    for job in sorted(borrowers, key=preemption_order, reverse=True):
        if used.room_for(vcs[job.vc], job.shape):
            used.add(job.vc, job.shape)
            covered.add(job.id)
    return used, covered, claimants


def schedule(
    snapshot: Snapshot,
    free: ClusterState | None = None,
    book: QueueBook | None = None,
    summary: RunningSummary | None = None,
) -> Decisions:
    """Decide what starts, what is preempted and why everything else waits.

    ``free``, if given, is the cluster's free capacity with the snapshot's running jobs
    taken, kept up to date by the caller (a simulation) between passes; the pass uses it
    in a trial and leaves it as it was. Without it, the pass builds it from the snapshot.
    ``book``, if given, holds the queued jobs (kept up to date by the caller, who then
    leaves ``snapshot.queued`` empty); the pass does not change it. ``summary``, if given,
    sums up the snapshot's running jobs (RunningSummary, kept up to date by the caller).
    """
    if book is None:
        book = _book(snapshot)
    if summary is None:
        summary = RunningSummary.of(snapshot.running)
    if free is None:
        cluster = ClusterState.of(snapshot.nodes, snapshot.running, snapshot.placement)
        return _schedule(snapshot, cluster, book, summary)
    with free.trial():
        return _schedule(snapshot, free, book, summary)


def _schedule(
    snapshot: Snapshot, cluster: ClusterState, book: QueueBook, summary: RunningSummary
) -> Decisions:
    used, covered, claimants = _guaranteed_use(snapshot, book, summary)
    victims = [job for job in summary.preemptible.values() if job.id not in covered]
    state = _Pass(snapshot, cluster, Borrowers(victims, snapshot.now), book, guaranteed_use=used)
    state.summary = summary
    vcs = {vc.name: vc for vc in snapshot.vcs}
    now = snapshot.now
    for vc_name, gpus in summary.interactive_gpus.items():
        state.interactive_gpus[vc_name] += gpus
    for vc_name, gpus in summary.borrowed_gpus.items():
        state.borrowed_gpus[vc_name] += gpus
    if any(vc.policy == Policy.FAIR_SHARE for vc in snapshot.vcs):
        for key, amount in snapshot.usage.items():
            state.usage[key] += amount
        for key in summary.gpus:
            state.usage[key] += summary.ran(key, now)
    if snapshot.explain:
        state.decisions.waits.extend(
            Wait(job.id, f"VC {job.vc} does not exist")
            for job in snapshot.queued
            if job.vc not in vcs
        )

    queues = {name: _VcQueue(vcs[name]) for name in book.vcs()}
    # VCs in the order of their first job (as one queue would have them).
    heads = {}
    for name, queue in queues.items():
        walk = _walk(state, queue, set(), lambda shape: False)
        head = walk.peek()
        if head is not None:
            heads[name] = queue_order(head)
    ordered = [queues[name] for name in sorted(heads, key=heads.__getitem__)]

    # Places kept by the pass before go first to the jobs they were kept for: nothing
    # judged earlier in this pass may take them, so no further victims are needed.
    kept = sorted((job for job in book.reserved.values() if job.id in claimants), key=queue_order)
    for job in kept:
        if _take_kept_place(state, queues[job.vc], job):
            state.judged.add(job.id)

    for queue in ordered:
        _phase_one(state, queue)
    _phase_two(state, ordered)
    for reservation in state.reservations:
        state.decisions.reservations[reservation.job.id] = reservation.shadow
    return state.decisions


def _walk(state: _Pass, queue: _VcQueue, skip: set[str], dead) -> Walk:
    vc = queue.vc
    return Walk(state.book.streams[vc.name], lambda job: state.rank(vc, job), skip, dead)


def _others_holds(state: _Pass, queue: _VcQueue, lift: bool) -> None:
    """Guaranteed work of one VC is not held back by other VCs' reservations (their quota
    guarantees it); phase two and the VC's own later jobs respect them."""
    for reservation in state.reservations:
        if reservation.job.vc != queue.vc.name:
            if lift:
                reservation.lift(state.cluster)
            else:
                reservation.hold(state.cluster)


def _phase_one(state: _Pass, queue: _VcQueue) -> None:
    """Start the VC's guaranteed work in order; leave the rest to the second phase."""
    explain = state.snapshot.explain
    walk = _walk(state, queue, state.judged, lambda shape: not explain and shape in queue.dead)
    _others_holds(state, queue, lift=True)
    state.lifted = queue
    state.unplaceable.clear()
    try:
        for job in walk:
            if queue.blocker is not None:
                if not explain:
                    break
                state.judged.add(job.id)
                _wait_behind_blocker(state, queue, [job])
                continue
            if job.preemptible or not state.guaranteed_use.room_for(queue.vc, job.shape):
                # Under FIFO, or once this job has waited past RF's starvation guard,
                # nothing behind it may start before it is judged (in phase two). A job
                # its user made preemptible holds no guaranteed work back.
                if not job.preemptible:
                    policy = queue.vc.policy
                    if policy == Policy.FIFO or (policy == Policy.RF and state.starved(job)):
                        break
                    if policy.reserves and queue.reservation is None:
                        # The VC's first job that cannot start now: the guaranteed work
                        # behind it leaves its place free (it is judged in phase two),
                        # or, with nothing to plan by, waits behind it.
                        if not _reserve(state, queue, job):
                            break
                    else:
                        queue.dead.add(job.shape)
                continue
            state.judged.add(job.id)
            _start_guaranteed(state, queue, job)
    finally:
        state.unplaceable.clear()
        state.backfill_budget.clear()
        _others_holds(state, queue, lift=False)
        state.lifted = None


def _phase_two(state: _Pass, queues: list[_VcQueue]) -> None:
    """Judge the jobs phase one left, of all VCs, for idle capacity: in queue order
    across VCs (fair lending: the VC borrowing least for its quota first); a VC whose
    queue is held back is left alone from then on."""
    explain = state.snapshot.explain
    walks: list[Walk] = []
    heap = []
    for queue in queues:
        walk = _walk(state, queue, state.judged, state.dead)
        walks.append(walk)
        if queue.blocker is not None:
            if explain:
                _wait_behind_blocker(state, queue, list(walk))
            continue
        head = walk.peek()
        if head is not None:
            heap.append((_lending_rank(state, queue), queue_order(head), len(walks) - 1))
    heapq.heapify(heap)
    while heap:
        rank, order, index = heap[0]
        queue, walk = queues[index], walks[index]
        head = walk.peek()
        if head is None:
            heapq.heappop(heap)
            continue
        now_rank = (_lending_rank(state, queue), queue_order(head))
        if now_rank != (rank, order):
            heapq.heapreplace(heap, (*now_rank, index))
            continue
        job = walk.next()
        _start_if_idle(state, queue, job)
        if queue.blocker is not None:
            heapq.heappop(heap)
            if explain:
                _wait_behind_blocker(state, queue, list(walk))


def _lending_rank(state: _Pass, queue: _VcQueue) -> float:
    if not state.snapshot.fair_lending:
        return 0.0
    quota = sum(resources.gpus for resources in queue.vc.quota.values())
    return state.borrowed_gpus[queue.vc.name] / max(quota, 1)


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
        _wait(state, queue, job, refusal, reservable=False)
        return
    placement = state.place_job(job)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=False)
        return
    victims = _choose_victims(state, job)
    if victims is None:
        if state.backfill_budget.get(job.shape, 0) <= 0:
            queue.dead.add(job.shape)
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


def _preempt(state: _Pass, victims: list[RunningJob], job: QueuedJob, reason: str) -> None:
    if victims:
        state.ends = None  # what they hold is pending now: plan reservations afresh
    for victim in victims:
        if victim.id in state.borrowers.held:
            state.borrowers.remove(victim)
        for pool in state.las_victims.values():
            if victim.id in pool.held:
                pool.remove(victim)
        state.preempted.add(victim.id)
        state.decisions.preemptions.append(Preemption(victim.id, reason, for_job=job.id))


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
    _preempt(
        state, victims, job, f"preempted so that job {job.id} of VC {queue.vc.name} gets its quota"
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
        _wait(state, queue, job, refusal, reservable=False)
        return
    guaranteed = not job.preemptible and state.guaranteed_use.room_for(queue.vc, job.shape)
    if not guaranteed and not state.snapshot.borrowing:
        _wait(
            state,
            queue,
            job,
            f"beyond VC {queue.vc.name}'s {job.shape.gpu_type} quota, and borrowing is off",
            reservable=False,
        )
        return
    placement = state.place_job(job)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=not guaranteed)
        return
    if queue.vc.policy == Policy.LAS and _preempt_for_less_attained(state, queue, job):
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


def _preempt_for_less_attained(state: _Pass, queue: _VcQueue, job: QueuedJob) -> bool:
    """Least attained service: make room for the job by preempting its VC's preemptible
    jobs of a later LAS queue that have run a quantum since they (re)started; True if
    a place is kept for it."""
    if queue.las_tries >= LAS_PREEMPTION_TRIES:
        return False
    queue.las_tries += 1
    # By what it ran, not where waiting moved it: a job let ahead for having waited
    # long takes what is free first, but preempts only as its queue would.
    level = las_level(job.attained, state.snapshot.las_thresholds)
    pool = state.las_victims.get((queue.vc.name, level))
    if pool is None:
        snapshot = state.snapshot
        now = snapshot.now
        pool = Borrowers(
            (
                running
                for running in state.summary.preemptible.values()
                if running.vc == queue.vc.name
                and running.id not in state.preempted
                and now - running.started_at >= snapshot.las_quantum
                and las_level(running.attained_at(now), snapshot.las_thresholds) > level
            ),
            now,
        )
        state.las_victims[(queue.vc.name, level)] = pool
    if not pool.held:
        return False
    victims = fewest_victims(state.cluster, pool, job)
    if not victims:
        return False
    kept = state.cluster.claim(job.shape, victims)
    if kept is None:
        raise RuntimeError(f"the victims chosen for job {job.id} do not make room for it")
    state.decisions.claims[job.id] = kept
    _preempt(
        state,
        victims,
        job,
        f"preempted by least attained service: job {job.id} of VC {queue.vc.name} has run less",
    )
    _wait(
        state,
        queue,
        job,
        f"starts once {len(victims)} preempted job(s) have released their GPUs",
        blocks=False,
    )
    return True


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
    if borrowing:
        state.borrowed_gpus[vc.name] += job.shape.total.gpus
    if vc.policy == Policy.FAIR_SHARE:
        state.usage[(vc.name, job.user)] += job.shape.total.gpus * FAIR_SHARE_START_SECONDS
    state.note_end(job, placement)


def _wait(
    state: _Pass,
    queue: _VcQueue,
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
        blocks = policy == Policy.FIFO or (policy == Policy.RF and state.starved(job))
        if policy.reserves and reservable and queue.reservation is None:
            blocks = not _reserve(state, queue, job)
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


def _reserve(state: _Pass, queue: _VcQueue, job: QueuedJob) -> bool:
    """Give the job the VC's reservation; False if running jobs give no time to plan it
    by (it then blocks its VC as under FIFO)."""
    # Reservations never share what they hold: other VCs' holds, lifted while this VC's
    # guaranteed work is placed, are back while this one is planned.
    lifted = state.lifted
    if lifted is not None:
        _others_holds(state, lifted, lift=False)
    try:
        reservation = reserve(state.cluster, job, state.running_ends(), state.snapshot.now)
        if reservation is None:
            return False
        if reservation is not NEVER:
            queue.reservation = reservation
            state.reservations.append(reservation)
            reservation.hold(state.cluster)
        return True
    finally:
        if lifted is not None:
            _others_holds(state, lifted, lift=True)


def _explain(state: _Pass, job: QueuedJob) -> str:
    return state.cluster.explain_no_fit(job.shape) if state.snapshot.explain else ""
