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

The policies live in their own modules: the order of a VC's queue (ordering, with edf,
las and fair_share), backfill's reservations (backfill, on reservations), least
attained service's preemption (las), and what is decided for one job (outcomes).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from jobmanager.core.backfill import dead_shapes, place_job, reserve_for
from jobmanager.core.dedication import snapshot_with_pools
from jobmanager.core.fair_share import load_usage
from jobmanager.core.las import preempt_for_less_attained
from jobmanager.core.ordering import rank_is_static, ranker
from jobmanager.core.outcomes import interactive_refusal, keep_place, record_start, wait
from jobmanager.core.pass_state import PassState, VcQueue, explain_no_fit, others_holds
from jobmanager.core.placement import ClusterState
from jobmanager.core.preemption import Borrowers, fewest_victims, preemption_order
from jobmanager.core.queues import QueueBook, Walk, queue_order
from jobmanager.core.running import QuotaUse, RunningSummary
from jobmanager.core.snapshot import (
    NO_RESOURCES,
    Decisions,
    JobShape,
    Policy,
    QueuedJob,
    RunningJob,
    Snapshot,
    Wait,
)

__all__ = ["QueueBook", "covered_borrowers", "queue_order", "schedule"]


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
        if not job.preemptible and used.take(vcs[job.vc], job.shape):
            claimants.add(job.id)
    covered: set[str] = set()
    borrowers = [job for job in summary.borrowers.values() if job.vc in vcs]
    for borrower in sorted(borrowers, key=preemption_order, reverse=True):
        if used.take(vcs[borrower.vc], borrower.shape):
            covered.add(borrower.id)
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
    Queued jobs go only to the dedicated nodes their VC may use (jobmanager.core.dedication);
    a caller that keeps ``book`` gives its jobs' shapes their pools itself.
    """
    if book is None:
        snapshot = snapshot_with_pools(snapshot)
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
    preemptible = summary.preemptible.values()
    victims = [job for job in preemptible if job.id not in covered] if covered else preemptible
    state = PassState(
        snapshot,
        cluster,
        Borrowers(victims, snapshot.now),
        book,
        guaranteed_use=used,
        summary=summary,
    )
    vcs = {vc.name: vc for vc in snapshot.vcs}
    for vc_name, gpus in summary.interactive_gpus.items():
        state.interactive_gpus[vc_name] += gpus
    for vc_name, gpus in summary.borrowed_gpus.items():
        state.borrowed_gpus[vc_name] += gpus
    load_usage(state)
    if snapshot.explain:
        state.decisions.waits.extend(
            Wait(job.id, f"VC {job.vc} does not exist")
            for job in snapshot.queued
            if job.vc not in vcs
        )

    queues = {name: VcQueue(vcs[name]) for name in book.vcs()}
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
    started_kept: dict[str, int] = dict.fromkeys(queues, 0)
    for job in kept:
        if _take_kept_place(state, queues[job.vc], job):
            state.judged.add(job.id)
            started_kept[job.vc] += 1

    for queue in ordered:
        name = queue.vc.name
        _phase_one(state, queue, book.unpreemptible[name] - started_kept[name])
    _phase_two(state, ordered)
    for reservation in state.reservations:
        state.decisions.reservations[reservation.job.id] = reservation.shadow
    return state.decisions


def _walk(
    state: PassState, queue: VcQueue, skip: set[str], dead: Callable[[JobShape], bool]
) -> Walk:
    vc = queue.vc
    static = rank_is_static(state, vc)
    # A pass walks a VC's streams up to three times (for its first job, in phase one, in
    # phase two), ranked by one function picked for the VC's policy: later walks start
    # from the first one's heap. Exact for static ranks, and under fair share and LAS,
    # whose ranks only grow during a pass (a user's usage, with each start): a walk ranks
    # its head again before giving it, and puts it back in line if it now ranks later.
    # Not under largest fit first, whose ranks follow the free capacity.
    reusable = static or vc.policy.shares_fairly
    first = state.first_heaps.get(vc.name) if reusable else None
    rankers = state.rankers
    rank = rankers.get(vc.name)
    if rank is None:
        rank = rankers[vc.name] = ranker(state, vc)
    walk = Walk(state.book.streams[vc.name], rank, skip, dead, static=static, first=first)
    if reusable and first is None:
        state.first_heaps[vc.name] = walk.first_heap()
    return walk


def _phase_one(state: PassState, queue: VcQueue, unpreemptible: int) -> None:
    """Start the VC's guaranteed work in order; leave the rest to the second phase.
    ``unpreemptible``: how many of the jobs the walk gives are not preemptible."""
    explain = state.snapshot.explain
    # A shape given up on is dropped whole, with or without reasons: its jobs are judged,
    # and explained, in phase two (so ten thousand waiting jobs are not read twice).
    # With every job preemptible there is nothing to read (and no blocker yet).
    walk = None
    if unpreemptible > 0:
        walk = _walk(state, queue, state.judged, lambda shape: shape in queue.dead)
    others_holds(state, queue, lift=True)
    state.lifted = queue
    state.unplaceable.clear()
    try:
        # Preemptible jobs are left to phase two: once the walk has given the last job
        # that is not, the rest is read only to give reasons behind a blocker.
        while walk is not None and (unpreemptible > 0 or (explain and queue.blocker)):
            job = walk.next()
            if job is None:
                break
            unpreemptible -= not job.preemptible
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
                    if state.holds_queue(policy, job):
                        break
                    if policy.reserves and queue.reservation is None:
                        # The VC's first job that cannot start now: the guaranteed work
                        # behind it leaves its place free (it is judged in phase two),
                        # or, with nothing to plan by, waits behind it.
                        if not reserve_for(state, queue, job):
                            break
                    else:
                        queue.dead.add(job.shape)
                continue
            state.judged.add(job.id)
            _start_guaranteed(state, queue, job)
    finally:
        state.unplaceable.clear()
        state.backfill_budget.clear()
        others_holds(state, queue, lift=False)
        state.lifted = None


def _phase_two(state: PassState, queues: list[VcQueue]) -> None:
    """Judge the jobs phase one left, of all VCs, for idle capacity: in queue order
    across VCs (fair lending: the VC borrowing least for its quota first); a VC whose
    queue is held back is left alone from then on."""
    explain = state.snapshot.explain
    walks: list[Walk] = []
    heap = []
    dead = dead_shapes(state)
    for queue in queues:
        walk = _walk(state, queue, state.judged, dead)
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
        assert job is not None  # peek() gave it
        _start_if_idle(state, queue, job)
        if queue.blocker is not None:
            heapq.heappop(heap)
            if explain:
                _wait_behind_blocker(state, queue, list(walk))


def _lending_rank(state: PassState, queue: VcQueue) -> float:
    if not state.snapshot.fair_lending:
        return 0.0
    quota = sum(resources.gpus for resources in queue.vc.quota.values())
    return state.borrowed_gpus[queue.vc.name] / max(quota, 1)


def _wait_behind_blocker(state: PassState, queue: VcQueue, jobs: list[QueuedJob]) -> None:
    if state.snapshot.explain:
        state.decisions.waits.extend(Wait(job.id, queue.blocker_reason) for job in jobs)


# --- phase one: guaranteed work -----------------------------------------------------------


def _start_guaranteed(state: PassState, queue: VcQueue, job: QueuedJob) -> None:
    refusal = interactive_refusal(state, queue.vc, job)
    if refusal:
        wait(state, queue, job, refusal, reservable=False)
        return
    placement = place_job(state, job)
    if placement is not None:
        record_start(state, queue.vc, job, placement, borrowing=False)
        return
    victims = _choose_victims(state, job)
    if victims is None:
        if state.backfill_budget.get(job.shape, 0) <= 0:
            queue.dead.add(job.shape)
        wait(state, queue, job, explain_no_fit(state, job))
        return
    kept = state.cluster.claim(job.shape, victims)
    if kept is None:
        raise RuntimeError(f"the victims chosen for job {job.id} do not make room for it")
    keep_place(state, queue, job, kept, victims)


def _take_kept_place(state: PassState, queue: VcQueue, job: QueuedJob) -> bool:
    """Start the job in the place the pass before kept for it (its quota counted already),
    or keep that place again while jobs being stopped still hold part of it; False (and
    its quota no longer counted) if that place is not to be had."""
    if not interactive_refusal(state, queue.vc, job):
        if state.cluster.take(job.reserved):
            record_start(state, queue.vc, job, job.reserved, borrowing=False, counted=True)
            return True
        if state.cluster.claim(job.shape, (), exactly=job.reserved):
            keep_place(state, queue, job, job.reserved, [], counted=True)
            return True
    state.guaranteed_use.add(queue.vc.name, job.shape, sign=-1)
    return False


def _choose_victims(state: PassState, job: QueuedJob) -> list[RunningJob] | None:
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


def _start_if_idle(state: PassState, queue: VcQueue, job: QueuedJob) -> None:
    refusal = interactive_refusal(state, queue.vc, job)
    if refusal:
        wait(state, queue, job, refusal, reservable=False)
        return
    guaranteed = not job.preemptible and state.guaranteed_use.room_for(queue.vc, job.shape)
    if not guaranteed and not state.snapshot.borrowing:
        wait(
            state,
            queue,
            job,
            f"beyond VC {queue.vc.name}'s {job.shape.gpu_type} quota, and borrowing is off",
            reservable=False,
        )
        return
    placement = place_job(state, job)
    if placement is not None:
        record_start(state, queue.vc, job, placement, borrowing=not guaranteed)
        return
    if queue.vc.policy == Policy.LAS and preempt_for_less_attained(state, queue, job):
        return
    reason = explain_no_fit(state, job)
    if state.snapshot.explain and not guaranteed and not job.preemptible:
        quota = queue.vc.quota.get(job.shape.gpu_type, NO_RESOURCES)
        used = state.guaranteed_use.gpus(queue.vc.name, job.shape.gpu_type)
        reason = (
            f"beyond VC {queue.vc.name}'s {job.shape.gpu_type} quota "
            f"({used} of {quota.gpus} GPUs in use) and no idle capacity to borrow: " + reason
        )
    wait(state, queue, job, reason)
