"""Deadlines that scale (issue 34, after ElasticFlow): throughput curves, the minimum
satisfactory share, and the admission answer for a job with a deadline.

A job's throughput curve gives its work per second (samples, steps: any unit) at 1, 2, ...
workers; beyond the curve's end a worker adds nothing. With the work it needs and its
deadline, the job's *minimum satisfactory share* is the fewest workers that, held from
now on, finish it by the deadline (ElasticFlow's idea: a deadline job needs that much and
no more; what is left goes where it shortens jobs most).

Admission replays the cluster forward from the snapshot: the job gets, at each moment,
as many one-worker places as are free once the running jobs hold theirs (each until its
expected end, else its wall time) and the queued deadline jobs due before it hold their
own satisfactory shares; it progresses at its curve's rate for that many workers (none
below its minimum). The earliest finish is when its work is done; it is admitted when
that is by its deadline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from jobmanager.core.placement import ClusterState
from jobmanager.core.snapshot import JobShape, QueuedJob, Snapshot


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer at submit: with ``share`` workers from now the job meets its deadline
    (None: no size does); ``earliest_finish`` is when it ends at the earliest on this
    cluster (inf: never, it cannot start)."""

    feasible: bool
    share: int | None
    earliest_finish: float


def curve_errors(curve: Sequence[float], max_workers: int) -> list[str]:
    """What is wrong with a throughput curve for a job of at most ``max_workers`` (none
    when it is good): at least one value, each positive and finite, none below the one
    before, no longer than max_workers."""
    errors: list[str] = []
    if not curve:
        errors.append("Give at least one value: the throughput at 1 worker.")
    if len(curve) > max_workers:
        errors.append(f"{len(curve)} values for at most {max_workers} workers (max_workers).")
    if any(not math.isfinite(value) or value <= 0 for value in curve):
        errors.append("Every value must be a positive number (work per second).")
    elif any(later < earlier for earlier, later in pairwise(curve)):
        errors.append("Values must not decrease: more workers never do less work a second.")
    return errors


def rate(curve: Sequence[float], workers: int) -> float:
    """Work per second at ``workers`` workers (0 for none; the curve's last value beyond it)."""
    if workers <= 0 or not curve:
        return 0.0
    return curve[min(workers, len(curve)) - 1]


def satisfactory_share(
    curve: Sequence[float], work: float, now: float, due: float, min_workers: int, max_workers: int
) -> int | None:
    """The fewest workers in [min_workers, max_workers] that, from ``now``, do ``work``
    by ``due`` (None: none does)."""
    if work <= 0:
        return min_workers
    for workers in range(min_workers, max_workers + 1):
        speed = rate(curve, workers)
        if speed > 0 and now + work / speed <= due:
            return workers
    return None


def growth_steps(
    curve: Sequence[float], work: float, workers: int, most: int
) -> list[tuple[float, int]]:
    """The ways to grow a job of ``workers`` workers (up to ``most``): (seconds taken off
    its remaining run per added worker, workers added), best first, fewer workers first
    among equals. Only sizes that run faster than every smaller one count, so that a curve
    that is flat between sizes (profiled at powers of two, say) is grown across the flat
    part at once rather than not at all."""
    if work <= 0:
        return []
    now_rate = rate(curve, workers)
    steps: list[tuple[float, int]] = []
    best_rate = now_rate
    for size in range(workers + 1, most + 1):
        size_rate = rate(curve, size)
        if size_rate <= best_rate:
            continue
        best_rate = size_rate
        saved = (work / now_rate if now_rate else math.inf) - work / size_rate
        steps.append((saved / (size - workers), size - workers))
    return sorted(steps, key=lambda step: (-step[0], step[1]))


def admit(snapshot: Snapshot, job: QueuedJob, curve: Sequence[float], work: float) -> Admission:
    """The admission answer for ``job`` (with ``job.due``) submitted into ``snapshot``."""
    elastic = job.elastic
    low, high = (
        (elastic.min_workers, elastic.max_workers)
        if elastic
        else (job.shape.workers, job.shape.workers)
    )
    due = job.due if job.due is not None else math.inf
    share = satisfactory_share(curve, work, snapshot.now, due, low, high)
    cluster = ClusterState.of(snapshot.nodes, snapshot.running, snapshot.placement)
    _hold_earlier_shares(cluster, snapshot, job, due)
    ends = sorted(
        ((end, running.placement)
         for running in snapshot.running
         if (end := running.expected_end or running.deadline) is not None),
        key=lambda ending: ending[0],
    )  # fmt: skip
    one = _one_worker(job.shape)
    now, left = snapshot.now, work
    index = 0
    while True:
        workers = _free_workers(cluster, one, high)
        speed = rate(curve, workers) if workers >= low else 0.0
        until = ends[index][0] if index < len(ends) else math.inf
        if speed > 0 and now + left / speed <= until:
            finish = now + left / speed
            return Admission(finish <= due, share, finish)
        if until == math.inf:
            return Admission(False, share, math.inf)
        left -= speed * max(0.0, until - now)
        now = max(now, until)
        while index < len(ends) and ends[index][0] <= now:
            cluster.release(ends[index][1])
            index += 1


def _one_worker(shape: JobShape) -> JobShape:
    return JobShape(shape.gpu_type, 1, shape.per_worker, shape.node_selector, shape.pools)


def _free_workers(cluster: ClusterState, one: JobShape, most: int) -> int:
    """How many single workers fit now (at most ``most``); nothing is kept taken."""
    count = 0
    with cluster.trial():
        while count < most and cluster.place(one) is not None:
            count += 1
    return count


def _hold_earlier_shares(
    cluster: ClusterState, snapshot: Snapshot, job: QueuedJob, due: float
) -> None:
    """Take the satisfactory shares of queued deadline jobs due before ``job``: admitted
    first, they are served first."""
    earlier = sorted(
        (other for other in snapshot.queued if other.id != job.id and other.due is not None),
        key=lambda other: (other.due, other.queued_at, other.id),
    )
    for other in earlier:
        if other.due is None or other.due > due:
            break
        elastic = other.elastic
        if elastic is None or not elastic.throughput or elastic.work is None:
            continue
        share = satisfactory_share(
            elastic.throughput,
            elastic.work,
            snapshot.now,
            other.due,
            elastic.min_workers,
            elastic.max_workers,
        )
        one = _one_worker(other.shape)
        for _ in range(share or 0):
            if cluster.place(one) is None:
                break
