"""The state of one scheduling pass (jobmanager.core.scheduler), shared by its policies."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobmanager.core.overdue import is_overdue, overdue_from, was_overdue
from jobmanager.core.placement import ClusterState
from jobmanager.core.preemption import Borrowers
from jobmanager.core.queues import HeapEntry, QueueBook, las_level
from jobmanager.core.reservations import EndsInOrder, Reservation, fits_when_empty
from jobmanager.core.running import QuotaUse, RunningSummary
from jobmanager.core.snapshot import (
    Decisions,
    JobShape,
    Policy,
    QueuedJob,
    RunningJob,
    Snapshot,
    VcState,
    WorkerPlacement,
)


class Usage(dict[tuple[str, str], float]):
    """Each (VC, user)'s usage during a pass (0 for one not given). It only grows once the
    pass has begun (each start adds to it), so ranks worked out from it earlier in the
    pass are never later than they are now."""

    def __missing__(self, key: tuple[str, str]) -> float:
        return 0.0


@dataclass
class VcQueue:
    """One VC's queue during a pass."""

    vc: VcState
    blocker: QueuedJob | None = None  # the job that holds the queue back
    blocker_reason: str = ""
    dead: set[JobShape] = field(default_factory=set)  # shapes phase one gave up on
    reservation: Reservation | None = None
    las_tries: int = 0


@dataclass
class PassState:
    """What one pass knows and has decided so far."""

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
    ends: EndsInOrder | None = None
    preempted: set[str] = field(default_factory=set)
    started_ends: list[tuple[float, tuple[WorkerPlacement, ...]]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    borrowed_gpus: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    las_victims: dict[tuple[str, int], Borrowers] = field(default_factory=dict)
    lifted: VcQueue | None = None  # whose phase one runs with other VCs' holds lifted
    summary: RunningSummary = field(default_factory=RunningSummary)
    ever_fits: dict[JobShape, bool] = field(default_factory=dict)
    # What does not change during a pass, worked out once a job: when it is overdue
    # (QueueBook.overdue_times, kept between passes: set in __post_init__), its LAS rank
    # (jobmanager.core.ordering), by job id.
    overdue_at: dict[str, float | None] = field(default_factory=dict)
    las_ranks: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # Likewise for running jobs, LAS's victims (jobmanager.core.las): whether each was
    # overdue when it started (RunningSummary.overdue_starts, kept between passes: set in
    # __post_init__), and its LAS queue now.
    was_overdue_ids: dict[str, bool] = field(default_factory=dict)
    running_levels: dict[str, int] = field(default_factory=dict)
    # Each VC's first heap of stream heads (jobmanager.core.scheduler._walk: a later walk
    # of the pass starts from a copy).
    first_heaps: dict[str, list[HeapEntry]] = field(default_factory=dict)
    # Each VC's ranking of its jobs (jobmanager.core.ordering.ranker), picked once a pass.
    rankers: dict[str, Callable[[QueuedJob], tuple[Any, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        snapshot = self.snapshot
        limits = (
            snapshot.las_wait_limit,
            snapshot.las_wait_factor,
            snapshot.las_limit_preempted_only,
            tuple((vc.name, vc.wait_limit) for vc in snapshot.vcs),
        )
        self.overdue_at = self.book.overdue_times(limits)
        self.was_overdue_ids = self.summary.overdue_starts(limits)

    def could_ever_run(self, shape: JobShape) -> bool:
        """Whether the schedulable nodes, were they empty, could hold the gang (cached:
        capacity and cordons do not change during a pass)."""
        known = self.ever_fits.get(shape)
        if known is None:
            known = self.ever_fits[shape] = fits_when_empty(self.cluster, shape)
        return known

    def is_overdue(self, job: QueuedJob, vc: VcState) -> bool:
        """jobmanager.core.overdue.is_overdue for the pass's snapshot, by when the job
        becomes overdue (worked out once while it is queued)."""
        overdue_at = self.overdue_at
        if job.id in overdue_at:
            at = overdue_at[job.id]
        else:
            at = overdue_at[job.id] = overdue_from(self.snapshot, job, vc)
        if at is None:
            return is_overdue(self.snapshot, job, vc)
        return self.snapshot.now >= at

    def was_overdue(self, running: RunningJob, vc: VcState) -> bool:
        """jobmanager.core.overdue.was_overdue for the pass's snapshot (cached)."""
        known = self.was_overdue_ids.get(running.id)
        if known is None:
            known = self.was_overdue_ids[running.id] = was_overdue(self.snapshot, running, vc)
        return known

    def running_level(self, running: RunningJob) -> int:
        """The running job's LAS queue by what it has attained now (cached)."""
        known = self.running_levels.get(running.id)
        if known is None:
            snapshot = self.snapshot
            attained = running.attained_at(snapshot.now)
            known = self.running_levels[running.id] = las_level(attained, snapshot.las_thresholds)
        return known

    def holds_queue(self, policy: Policy, job: QueuedJob) -> bool:
        """Whether the job, waiting, holds back the VC's jobs behind it by order alone:
        FIFO's head, or RF's once past the starvation guard. Not a job that no
        schedulable nodes could hold (cordoned or gone): that would hold the VC until an
        admin acts, where Slurm passes over a job whose nodes are not available."""
        ordered = policy == Policy.FIFO or (policy == Policy.RF and self.starved(job))
        return ordered and self.could_ever_run(job.shape)

    def starved(self, job: QueuedJob) -> bool:
        """Whether the job has waited past runnable first's starvation guard."""
        return self.snapshot.now - job.queued_at >= self.snapshot.starvation_seconds


def others_holds(state: PassState, queue: VcQueue, lift: bool) -> None:
    """Guaranteed work of one VC is not held back by other VCs' reservations (their quota
    guarantees it); phase two and the VC's own later jobs respect them."""
    for reservation in state.reservations:
        if reservation.job.vc != queue.vc.name:
            if lift:
                reservation.lift(state.cluster)
            else:
                reservation.hold(state.cluster)


def explain_no_fit(state: PassState, job: QueuedJob) -> str:
    return state.cluster.explain_no_fit(job.shape) if state.snapshot.explain else ""
