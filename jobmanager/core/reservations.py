"""Backfill reservations (EASY backfilling, as Slurm's ``sched/backfill``).

The first job of a VC that cannot start gets a *reservation*: the earliest time (its
shadow time) at which running jobs, ending when they are expected to, leave room for its
gang, and the nodes it would take then. Of what is free now on those nodes, the part that
jobs ending before the shadow time do not give back is *held*: taken for every later
placement, so that a job which starts now and runs past the shadow time cannot take it.
A job expected to end before the shadow time may use the held resources too, and what it
takes counts as given back by then.

Expected ends come from each running job (RunningJob.expected_end: wall time or what its
user's similar jobs really ran); a job already past its expected end is assumed to run as
long again as it has so far, so that a reservation is never planned in the past.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from jobmanager.core.placement import MOST_WORKERS, ClusterState, FreeNode, workers_fitting
from jobmanager.core.snapshot import JobShape, QueuedJob, Resources, RunningJob, WorkerPlacement
from jobmanager.core.topology import nodes_by_switch

Amounts = tuple[int, int, int]  # GPUs, millicores, MiB
SHORT_MARGIN = 1.5
OVERRUN_SECONDS = 600.0
OVERRUN_SHARE = 0.1
UNKNOWN_SECONDS = 60.0


def known_end(job: RunningJob) -> float | None:
    """The earlier of a running job's expected end and its deadline (None: neither)."""
    end, deadline = job.expected_end, job.deadline
    if end is None or (deadline is not None and deadline < end):
        end = deadline
    return end


def effective_end(job: RunningJob, now: float) -> float:
    """When a running job is taken to end, for reservations."""
    if job.releasing:
        return now
    end = known_end(job)
    if end is None:
        # None known: it is taken to run as long again as it has so far.
        return now + max(UNKNOWN_SECONDS, now - job.started_at)
    if end > now:
        return end
    # Past its expected end (its wall time not enforced yet): soon, rather than late, so
    # that few jobs count as short enough to backfill onto the reserved nodes meanwhile
    # (a reservation planned too early costs some backfill; one planned too late lets
    # short jobs fill the nodes it needs and slips when the job does end).
    return now + max(OVERRUN_SECONDS, OVERRUN_SHARE * (now - job.started_at))


End = tuple[float, int, tuple[WorkerPlacement, ...]]  # (end, tie-breaker, placement)
Ends = list[End]


class EndsInOrder:
    """What holds resources, in order of end, worked out only as far as it is read: a
    reservation usually finds room among the first few of hundreds of running jobs.
    Iterating gives every end in order, each time from the start; ``insert`` adds one
    (a job started in the pass)."""

    def __init__(self, source: Iterator[End], added: Iterable[End] = ()) -> None:
        self._source = source
        self._read: Ends = []
        self.added: Ends = sorted(added)

    def insert(self, end: End) -> None:
        insort(self.added, end)

    def _running(self) -> Iterator[End]:
        read = self._read
        index = 0
        while True:
            if index < len(read):
                yield read[index]
                index += 1
                continue
            item = next(self._source, None)
            if item is None:
                return
            read.append(item)

    def __iter__(self) -> Iterator[End]:
        if not self.added:
            return self._running()
        return heapq.merge(self._running(), self.added)


class RunningEnds:
    """The running jobs that hold resources (not releasing), kept in order of their known
    ends as they start and stop, so that a pass orders them by effective end without
    computing it for each one: only those past their known end, or with none, move with
    the clock, and those in order of start (the latest start ends first). Ties go by the
    order the jobs were added in (a snapshot's running order)."""

    def __init__(self) -> None:
        self._added = 0
        self._known: Ends = []  # (known end, order added, placement), sorted
        # The same jobs by latest start: (-start, order added, start, known end, placement).
        self._by_start: list[tuple[float, int, float, float, tuple[WorkerPlacement, ...]]] = []
        self._started: dict[int, float] = {}  # order added -> start, of those in _known
        # Jobs with no known end, in order: order added -> (start, placement).
        self._unknown: dict[int, tuple[float, tuple[WorkerPlacement, ...]]] = {}
        self._key: dict[str, tuple[float | None, int]] = {}  # job id -> (known end, order)

    def add(self, job: RunningJob) -> None:
        if job.releasing:
            return  # pending already: free for reservations
        order = self._added
        self._added += 1
        end = known_end(job)
        self._key[job.id] = (end, order)
        if end is None:
            self._unknown[order] = (job.started_at, job.placement)
        else:
            self._started[order] = job.started_at
            insort(self._known, (end, order, job.placement))
            started = job.started_at
            insort(self._by_start, (-started, order, started, end, job.placement))

    def remove(self, job: RunningJob) -> None:
        key = self._key.pop(job.id, None)
        if key is None:
            return
        end, order = key
        if end is None:
            del self._unknown[order]
        else:
            started = self._started.pop(order)
            del self._known[bisect_left(self._known, (end, order))]
            del self._by_start[bisect_left(self._by_start, (-started, order))]

    def at(self, now: float, skip: set[str]) -> Ends:
        """(effective end at ``now``, tie-breaker, placement) of every job but those in
        ``skip``, in order: ``effective_end`` of each job, sorted."""
        return list(self.in_order(now, skip))

    def in_order(self, now: float, skip: set[str]) -> EndsInOrder:
        """``at``, worked out as far as it is read (``skip`` as it is now)."""
        orders = {self._key[job_id][1] for job_id in skip if job_id in self._key}
        known = self._known
        past = bisect_right(known, (now, math.inf))  # known[:past] end by now: overrun
        ahead = (item for item in islice(known, past, None) if item[1] not in orders)
        unknown = sorted(
            (now + max(UNKNOWN_SECONDS, now - started_at), order, placement)
            for order, (started_at, placement) in self._unknown.items()
            if order not in orders
        )
        overrun = self._overrun(now, orders)
        return EndsInOrder(heapq.merge(ahead, overrun, unknown))

    def _overrun(self, now: float, orders: set[int]) -> Iterator[End]:
        """The jobs past their known end, in order of effective end: the latest started
        first (the end grows as the start goes back; each rounded step is monotone), jobs
        whose ends come out equal by order added."""
        run: Ends = []
        run_end = None
        for _, order, started, end, placement in self._by_start:
            if end > now or order in orders:
                continue
            effective = now + max(OVERRUN_SECONDS, OVERRUN_SHARE * (now - started))
            if effective != run_end:
                if run:
                    run.sort()
                    yield from run
                run = []
                run_end = effective
            run.append((effective, order, placement))
        run.sort()
        yield from run


@dataclass
class Reservation:
    """A place kept at ``shadow`` for ``job``; ``held`` is what is taken of free resources
    now so that nothing running past the shadow time gets it."""

    job: QueuedJob
    shadow: float
    needed: dict[str, Amounts]  # node -> what the gang takes there at the shadow time
    released: dict[str, Amounts]  # node -> what comes free there by the shadow time
    held: list[WorkerPlacement] = field(default_factory=list)

    def is_short(self, duration: float | None, now: float) -> bool:
        """Whether a job of this expected duration, started now, ends by the shadow
        even if it runs half as long again as expected (learned estimates are means)."""
        return duration is not None and now + SHORT_MARGIN * duration <= self.shadow

    def hold(self, cluster: ClusterState) -> None:
        """Take what the gang needs at the shadow time of what is free now and does not
        come free by then otherwise."""
        self.held = []
        for name, need in self.needed.items():
            node = cluster.nodes[name]
            # All of it, not less what running jobs are expected to give back: they may
            # run longer than expected, and the reservation would slip.
            gpus = max(0, min(len(node.free_gpus), need[0]))
            millicpus = max(0, min(node.free_millicpus, need[1]))
            memory = max(0, min(node.free_memory, need[2]))
            if gpus or millicpus or memory:
                self.held.append(
                    WorkerPlacement(name, tuple(node.free_gpus[:gpus]), millicpus, memory)
                )
        cluster.occupy(self.held)

    def lift(self, cluster: ClusterState) -> None:
        cluster.release(self.held)
        self.held = []

    def gives_back(self, placement: tuple[WorkerPlacement, ...]) -> None:
        """A job that ends before the shadow time took this: it comes back by then."""
        for worker in placement:
            if worker.node in self.needed:
                back = self.released.get(worker.node, (0, 0, 0))
                self.released[worker.node] = (
                    back[0] + len(worker.gpus),
                    back[1] + worker.millicpus,
                    back[2] + worker.memory,
                )


def _eligible(node: FreeNode, shape: JobShape) -> bool:
    return (
        node.state.schedulable
        and node.state.gpu_type == shape.gpu_type
        and shape.per_worker.fits_in(node.state.capacity)
        and node.admits(shape)
    )


def _eligible_nodes(cluster: ClusterState, shape: JobShape) -> list[FreeNode]:
    """The nodes that could ever hold a worker of the shape, in the cluster's order."""
    nodes = cluster.eligible_nodes.get(shape)
    if nodes is None:
        nodes = [node for node in cluster.nodes.values() if _eligible(node, shape)]
        cluster.eligible_nodes[shape] = nodes
    return nodes


NEVER = "never"


def _workers_in(
    shape: JobShape, capacity: Resources, gpus: int, millicpus: int, memory: int
) -> int:
    """How many workers fit in these free amounts of a node (a whole node's worker only in
    all of it)."""
    if shape.takes_whole_nodes:
        whole = (gpus, millicpus, memory) == (capacity.gpus, capacity.millicpus, capacity.memory)
        return 1 if whole else 0
    return workers_fitting(shape.per_worker, gpus, millicpus, memory)


def _fitting(shape: JobShape) -> Callable[[Resources, int, int, int], int]:
    """``_workers_in`` for one shape: a job asking GPUs, CPU and memory, of less than a
    whole node, counts its workers in three divisions (a reservation asks this of every
    eligible node and every end it walks)."""
    need = shape.per_worker
    gpus_each, millicpus_each, memory_each = need.gpus, need.millicpus, need.memory
    if shape.takes_whole_nodes or min(gpus_each, millicpus_each, memory_each) <= 0:
        return lambda capacity, gpus, millicpus, memory: _workers_in(
            shape, capacity, gpus, millicpus, memory
        )

    def fitting(capacity: Resources, gpus: int, millicpus: int, memory: int) -> int:
        if gpus <= 0 or millicpus <= 0 or memory <= 0:
            return 0
        return min(
            MOST_WORKERS, gpus // gpus_each, millicpus // millicpus_each, memory // memory_each
        )

    return fitting


def fits_when_empty(
    cluster: ClusterState, shape: JobShape, within: frozenset[str] | None = None
) -> bool:
    """Whether the schedulable nodes (``within`` these), were they empty, could hold the
    gang (one that needs one switch: under one switch)."""
    if within is None and shape.needs_one_switch:
        groups = nodes_by_switch(cluster, shape).values()
        return any(fits_when_empty(cluster, shape, group) for group in groups)
    ever = 0
    for node in _eligible_nodes(cluster, shape):
        if within is None or node.name in within:
            capacity = node.state.capacity
            ever += _workers_in(shape, capacity, capacity.gpus, capacity.millicpus, capacity.memory)
            if ever >= shape.workers:
                return True
    return False


def reserve(
    cluster: ClusterState, job: QueuedJob, ends: Iterable[End], now: float
) -> Reservation | str | None:
    """The job's reservation: ``ends`` are (expected end, tie-breaker, placement) of the
    jobs holding resources, in order of end; None if they do not leave room for it by
    the end of those with an expected end; NEVER if it cannot run here at all. A gang that
    needs one network switch gets the earliest of those under each switch."""
    if not job.shape.needs_one_switch:
        return _reserve(cluster, job, ends, now)
    found: list[Reservation | str | None] = [
        _reserve(cluster, job, ends, now, within)
        for within in nodes_by_switch(cluster, job.shape).values()
    ]
    planned = [item for item in found if isinstance(item, Reservation)]
    if planned:
        return min(planned, key=lambda reservation: reservation.shadow)
    return None if None in found else NEVER


def _reserve(
    cluster: ClusterState,
    job: QueuedJob,
    ends: Iterable[End],
    now: float,
    within: frozenset[str] | None = None,
) -> Reservation | str | None:
    shape = job.shape
    per_worker = shape.per_worker
    amounts: dict[str, list[int]] = {}
    fitting: dict[str, int] = {}
    total = 0
    workers_in = _fitting(shape)
    for node in _eligible_nodes(cluster, shape):
        name = node.name
        if within is None or name in within:
            here = [
                len(node.free_gpus) + len(node.pending_gpus),
                node.free_millicpus + node.pending_millicpus,
                node.free_memory + node.pending_memory,
            ]
            amounts[name] = here
            fitting[name] = workers_in(node.state.capacity, *here)
            total += fitting[name]
    # (What fits in free and pending resources fits an empty cluster: no need to ask.)
    if total < shape.workers and not fits_when_empty(cluster, shape, within):
        return NEVER  # it cannot run here even on an empty cluster: nothing to keep
    shadow = None
    if total >= shape.workers:
        shadow = now  # only jobs being stopped stand in the way
    else:
        for end, _, placement in ends:
            for worker in placement:
                freed = amounts.get(worker.node)
                if freed is None:
                    continue
                freed[0] += len(worker.gpus)
                freed[1] += worker.millicpus
                freed[2] += worker.memory
                capacity = cluster.nodes[worker.node].state.capacity
                now_fitting = workers_in(capacity, *freed)
                total += now_fitting - fitting[worker.node]
                fitting[worker.node] = now_fitting
            if total >= shape.workers:
                shadow = end
                break
    if shadow is None:
        return None
    # The nodes it takes then: those that fit the most workers (whole nodes for gangs).
    needed: dict[str, Amounts] = {}
    left = shape.workers

    # Nodes free now first, so that one pass after another keeps the same nodes (and
    # what is held stays held) rather than moving the reservation around.
    def preference(name: str) -> tuple[Any, ...]:
        node = cluster.nodes[name]
        return (-fitting[name], -len(node.free_gpus), -node.free_millicpus, name)

    # (At most one node a worker: the first ``workers`` of those with room, in order.)
    room = [name for name, count in fitting.items() if count > 0]
    for name in heapq.nsmallest(shape.workers, room, key=preference):
        if left <= 0:
            break
        count = min(left, fitting[name])
        needed[name] = (
            per_worker.gpus * count,
            per_worker.millicpus * count,
            per_worker.memory * count,
        )
        if shape.takes_whole_nodes:
            capacity = cluster.nodes[name].state.capacity
            needed[name] = (capacity.gpus, capacity.millicpus, capacity.memory)
        left -= count
    released: dict[str, Amounts] = {}
    for name in needed:
        node = cluster.nodes[name]
        here = amounts[name]
        released[name] = (
            here[0] - len(node.free_gpus),
            here[1] - node.free_millicpus,
            here[2] - node.free_memory,
        )
    return Reservation(job, shadow, needed, released)
