"""Queued jobs as a pass reads them: by VC, in streams of one shape and one group.

A stream holds the jobs of one VC with one shape and one group (their LAS queue and user
under least attained service, their user under fair share, none otherwise), in queue
order. A pass merges a VC's streams by each head's place under the VC's policy, and drops a whole
stream once its shape cannot start any more in the pass (free capacity only shrinks), so
that a pass reads the jobs it decides on, not the whole queue. The simulator keeps one
book up to date between passes; the live system builds one per pass.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jobmanager.core.snapshot import JobShape, Policy, QueuedJob, VcState


def queue_order(job: QueuedJob) -> tuple[Any, ...]:
    """Priority first, then submission time (kept by preempted jobs, which so come back at
    the head), then the largest gang among jobs submitted at the same instant."""
    shape = job.shape
    gpus = shape.per_worker.gpus * shape.workers
    return (-job.priority, job.queued_at, -gpus, -shape.workers, job.id)


def las_level(attained: float, thresholds: tuple[float, ...]) -> int:
    """The LAS queue of a job that has run this many GPU-seconds (0: the first)."""
    level = 0
    for threshold in thresholds:
        if attained < threshold:
            break
        level += 1
    return level


StreamKey = tuple[JobShape, object]
# A stream's head in a Walk: its rank, its place in the stream, its index, the stream.
HeapEntry = tuple[tuple[Any, ...], tuple[Any, ...], int, StreamKey]


class QueueBook:
    """Every queued job, in streams by VC, shape and group, each in queue order."""

    def __init__(self, vcs: Iterable[VcState], las_thresholds: tuple[float, ...]) -> None:
        self.policies = {vc.name: vc.policy for vc in vcs}
        self.las_thresholds = las_thresholds
        self.streams: dict[str, dict[StreamKey, list[tuple[tuple[Any, ...], QueuedJob]]]] = (
            defaultdict(dict)
        )
        self.jobs: dict[str, tuple[str, StreamKey, tuple[Any, ...]]] = {}  # id -> VC, stream, order
        self.reserved: dict[str, QueuedJob] = {}  # jobs with a place kept for them
        # Queued jobs not preemptible, by VC: phase one, which starts only those, stops
        # once it has read them all instead of reading on through preemptible ones.
        self.unpreemptible: dict[str, int] = defaultdict(int)
        # When each queued job becomes overdue (jobmanager.core.overdue.overdue_from), kept
        # between passes while the wait limits stay those of ``overdue_limits``: a job's
        # entry goes when it leaves the book or comes back to it (preempted, it has run).
        self.overdue_at: dict[str, float | None] = {}
        self.overdue_limits: object = None

    @classmethod
    def of(
        cls, queued: Iterable[QueuedJob], vcs: Iterable[VcState], las_thresholds: tuple[Any, ...]
    ) -> QueueBook:
        book = cls(vcs, las_thresholds)
        jobs = [job for job in queued if job.vc in book.policies]
        if len({job.id for job in jobs}) < len(jobs):
            for job in jobs:  # a job given twice: the later one replaces it, as add does
                book.add(job)
            return book
        # Each stream sorted once (the same order as adding the jobs one by one: no two
        # jobs share a place, their ids being in it), not kept sorted job by job.
        for job in jobs:
            key = (job.shape, book.group(job))
            order = book.order(job)
            book.streams[job.vc].setdefault(key, []).append((order, job))
            book.jobs[job.id] = (job.vc, key, order)
            book.unpreemptible[job.vc] += not job.preemptible
            if job.reserved:
                book.reserved[job.id] = job
        for streams in book.streams.values():
            for stream in streams.values():
                stream.sort()
        return book

    def group(self, job: QueuedJob) -> object:
        policy = self.policies[job.vc]
        if policy == Policy.LAS:
            return (las_level(job.attained, self.las_thresholds), job.user)
        if policy == Policy.FAIR_SHARE:
            return job.user
        if policy == Policy.BACKFILL and job.due is not None:
            return "deadline"
        if policy == Policy.BACKFILL and job.burst:
            return ("burst", job.burst)
        return None

    def order(self, job: QueuedJob) -> tuple[Any, ...]:
        """A job's place in its stream: queue order; by deadline first in backfill's
        stream of jobs with one (earliest deadline first)."""
        if job.due is not None and self.policies[job.vc] == Policy.BACKFILL:
            return (job.due, *queue_order(job))
        return queue_order(job)

    def add(self, job: QueuedJob) -> None:
        if job.id in self.jobs:
            self.remove(job.id)
        key = (job.shape, self.group(job))
        order = self.order(job)
        insort(self.streams[job.vc].setdefault(key, []), (order, job))
        self.jobs[job.id] = (job.vc, key, order)
        self.unpreemptible[job.vc] += not job.preemptible
        if job.reserved:
            self.reserved[job.id] = job

    def overdue_times(self, limits: object) -> dict[str, float | None]:
        """``overdue_at`` for a pass whose wait limits are ``limits`` (emptied if they
        differ from the last pass's)."""
        if limits != self.overdue_limits:
            self.overdue_at.clear()
            self.overdue_limits = limits
        return self.overdue_at

    def remove(self, job_id: str) -> None:
        vc, key, order = self.jobs.pop(job_id)
        stream = self.streams[vc][key]
        index = bisect_left(stream, (order,))
        while stream[index][1].id != job_id:
            index += 1
        self.unpreemptible[vc] -= not stream[index][1].preemptible
        del stream[index]
        if not stream:
            del self.streams[vc][key]
        self.reserved.pop(job_id, None)
        self.overdue_at.pop(job_id, None)

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.jobs

    def vcs(self) -> list[str]:
        return [vc for vc, streams in self.streams.items() if streams]

    def all_jobs(self) -> Iterator[QueuedJob]:
        for streams in self.streams.values():
            for stream in streams.values():
                for _, job in stream:
                    yield job


class Walk:
    """One VC's queued jobs in its policy's order, read lazily.

    ``rank(job)`` gives a job's place before its queue order (its LAS queue, its user's
    usage); it may grow while the walk goes on (fair share), and a stream whose head now
    ranks later is put back in line. With ``static``, the caller promises that a job's rank
    does not change during the walk, and a head is not ranked again. Jobs in ``skip`` are
    passed over; a stream whose shape ``dead(shape)`` says cannot start is dropped whole.
    ``first``, if given, is the ``first_heap`` of an earlier walk of the same streams whose
    heads rank now as they did then, or (not ``static``) no earlier than then: the walk
    starts from a copy instead of ranking them, and ranks a head again before giving it.
    """

    def __init__(
        self,
        streams: dict[StreamKey, list[tuple[tuple[Any, ...], QueuedJob]]],
        rank: Callable[[QueuedJob], tuple[Any, ...]],
        skip: set[str],
        dead: Callable[[JobShape], bool],
        static: bool = False,
        first: list[HeapEntry] | None = None,
    ) -> None:
        self.streams = streams
        self.rank = rank
        self.static = static
        self.skip = skip
        self.dead = dead
        self.heap: list[HeapEntry]
        if first is not None:
            self.heap = first.copy()
            return
        self.heap = [(rank(stream[0][1]), stream[0][0], 0, key) for key, stream in streams.items()]
        heapq.heapify(self.heap)

    def first_heap(self) -> list[HeapEntry]:
        """The heap as the walk starts (before any peek): for a later walk's ``first``."""
        return self.heap.copy()

    def peek(self) -> QueuedJob | None:
        heap = self.heap
        while heap:
            rank, order, index, key = heap[0]
            stream = self.streams[key]
            if self.dead(key[0]):
                heapq.heappop(heap)
                continue
            job = stream[index][1]
            if job.id in self.skip:
                self._advance()
                continue
            if not self.static:
                now_rank = self.rank(job)
                if now_rank != rank:
                    heapq.heapreplace(heap, (now_rank, order, index, key))
                    continue
            return job
        return None

    def _advance(self) -> None:
        _, _, index, key = self.heap[0]
        stream = self.streams[key]
        if index + 1 < len(stream):
            following = stream[index + 1]
            heapq.heapreplace(self.heap, (self.rank(following[1]), following[0], index + 1, key))
        else:
            heapq.heappop(self.heap)

    def next(self) -> QueuedJob | None:
        job = self.peek()
        if job is not None:
            self._advance()
        return job

    def __iter__(self) -> Iterator[QueuedJob]:
        while (job := self.next()) is not None:
            yield job
