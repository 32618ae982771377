"""Elastic jobs: sizes decided around the plain pass (issue 34).

An elastic job (``Elastic`` on its QueuedJob or RunningJob) runs with any number of
workers in [min_workers, max_workers]. Its VC's quota counts min_workers as guaranteed;
the workers above are borrowed and preemptible. :func:`schedule_elastic` wraps
:func:`jobmanager.core.scheduler.schedule` without changing it:

- A queued elastic job is judged at min_workers, so it starts as soon as that many fit;
  one with a deadline and a throughput curve at its minimum satisfactory share
  (jobmanager.core.deadlines), so that it starts with what meets its deadline.
- A running elastic job shows the pass its first min_workers workers as the job, and
  the workers above as a separate borrower (its *extras*).
- Shrinking comes before preempting: while the pass leaves queued jobs waiting or
  preempts, the elastic jobs that may be resized are shrunk to min_workers in a trial,
  the largest first, and a shrink is kept only if the pass then preempts fewer whole
  jobs or keeps more GPUs for guaranteed work (so each kept shrink is one resize, and
  none is wasted; at most MAX_SHRINK_TRIALS trials a pass, each a whole pass). The
  workers a shrink stops are, for that pass, like a preempted job's: guaranteed work
  claims them and starts there once they are gone.
- A pass that preempts a job's extras shrinks it to min_workers; if the job may not be
  resized yet, the whole job is preempted instead (the rate limit holds).
- Growing comes last: the GPUs still idle once every start and kept place is taken go
  to jobs that may be resized and to the jobs starting now (a job shrunk in this pass
  takes back its own workers' GPUs first, so that it changes as little as it can). Jobs
  with a deadline and a throughput curve get their minimum satisfactory share first
  (earliest deadline first; jobmanager.core.deadlines), then further workers go to the
  job with a curve that they shorten most per worker (diminishing returns: a step that
  adds no throughput is not given; where a curve is flat between sizes, as a curve
  profiled at powers of two is, the workers up to the next faster size go at once, as
  one gang), then one worker at a time round the jobs without a curve (deadlines first,
  then queue order).

Each size is a complete gang: every worker gets whole GPUs on one node, placed like any
job's. A job is resized at most once per ``Elastic.min_interval`` (its start counts as a
resize); a resize is a ``Resize`` decision, whose placement lists every worker's place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import NamedTuple

from jobmanager.core.deadlines import growth_steps, satisfactory_share
from jobmanager.core.dedication import snapshot_with_pools
from jobmanager.core.placement import ClusterState
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    Decisions,
    Elastic,
    JobShape,
    Preemption,
    QueuedJob,
    Resize,
    RunningJob,
    Snapshot,
    Start,
    WorkerPlacement,
)

EXTRAS = "+extras"  # the id of a running elastic job's workers above its minimum
# Each trial shrink costs a whole pass: at most this many a pass (the largest jobs first).
MAX_SHRINK_TRIALS = 16

Pass = Callable[[Snapshot], Decisions]


def last_resize(job: RunningJob) -> float:
    return job.started_at if job.resized_at is None else job.resized_at


def may_resize(job: RunningJob, now: float) -> bool:
    """Whether the job may change size now: elastic, not being stopped, and its last
    resize (or start) at least its minimum interval ago."""
    elastic = job.elastic
    return (
        elastic is not None
        and elastic.min_workers < elastic.max_workers
        and not job.releasing
        and now - last_resize(job) >= elastic.min_interval
    )


def with_workers(shape: JobShape, workers: int) -> JobShape:
    return JobShape(shape.gpu_type, workers, shape.per_worker, shape.node_selector, shape.pools)


def schedule_elastic(snapshot: Snapshot, decide: Pass = schedule) -> Decisions:
    """The plain pass's decisions with elastic jobs' sizes decided as the module says."""
    now = snapshot.now
    elastic_running = {
        job.id: job
        for job in snapshot.running
        if job.elastic is not None and job.shape.workers > job.elastic.min_workers
    }
    resizable = [job for job in elastic_running.values() if may_resize(job, now)]
    queued = tuple(_at_minimum(job, now) for job in snapshot.queued)

    def trial(shrunk: frozenset[str]) -> Decisions:
        running = _view(snapshot.running, elastic_running, shrunk)
        return decide(replace(snapshot, running=running, queued=queued))

    shrunk: frozenset[str] = frozenset()
    decisions = trial(shrunk)
    largest_first = sorted(resizable, key=lambda job: (-job.shape.total.gpus, job.id))
    for job in largest_first[:MAX_SHRINK_TRIALS]:
        if not _wants_room(decisions, snapshot):
            break
        tried = trial(shrunk | {job.id})
        if _score(tried) > _score(decisions):
            shrunk, decisions = shrunk | {job.id}, tried
    return _settle(snapshot, elastic_running, shrunk, decisions)


def _at_minimum(job: QueuedJob, now: float) -> QueuedJob:
    """The job as the plain pass judges it: at its minimum, or, for a deadline job with a
    curve, at its minimum satisfactory share (it starts with what meets its deadline)."""
    elastic = job.elastic
    if elastic is None:
        return job
    size = elastic.min_workers
    if job.due is not None and elastic.throughput and elastic.work is not None:
        share = satisfactory_share(
            elastic.throughput, elastic.work, now, job.due,
            elastic.min_workers, elastic.max_workers,
        )  # fmt: skip
        size = share or size
    if job.shape.workers == size:
        return job
    return replace(job, shape=with_workers(job.shape, size))


def _split(job: RunningJob) -> tuple[RunningJob, RunningJob]:
    """The job's first min_workers workers as the job, the rest as a borrower."""
    assert job.elastic is not None
    keep = job.elastic.min_workers
    core = replace(job, shape=with_workers(job.shape, keep), placement=job.placement[:keep])
    extras = replace(
        job,
        id=job.id + EXTRAS,
        shape=with_workers(job.shape, job.shape.workers - keep),
        placement=job.placement[keep:],
        borrowing=True,
    )
    return core, extras


def _view(
    running: Iterable[RunningJob], elastic: dict[str, RunningJob], shrunk: frozenset[str]
) -> tuple[RunningJob, ...]:
    """Running jobs as the plain pass sees them: elastic ones split; the extras of those
    being shrunk are being released (a guaranteed job may claim them, as it may a
    preempted job's, and starts there once they are gone)."""
    seen: list[RunningJob] = []
    for job in running:
        if job.id not in elastic:
            seen.append(job)
            continue
        core, extras = _split(job)
        seen.append(core)
        seen.append(replace(extras, releasing=True) if job.id in shrunk else extras)
    return tuple(seen)


def _wants_room(decisions: Decisions, snapshot: Snapshot) -> bool:
    return bool(decisions.preemptions) or len(decisions.starts) < len(snapshot.queued)


def _score(decisions: Decisions) -> tuple[int, int, int, int]:
    """Fewer whole jobs preempted, then more GPUs started, then more kept for guaranteed
    work, then fewer extras preempted."""
    whole = sum(1 for p in decisions.preemptions if not p.job_id.endswith(EXTRAS))
    extras = len(decisions.preemptions) - whole
    started = sum(sum(_gpus(start.placement)) for start in decisions.starts)
    kept = sum(sum(_gpus(place)) for place in decisions.claims.values())
    return (-whole, started, kept, -extras)


def _gpus(placement: Iterable[WorkerPlacement]) -> list[int]:
    return [len(worker.gpus) for worker in placement]


def _settle(
    snapshot: Snapshot,
    elastic: dict[str, RunningJob],
    shrunk: frozenset[str],
    decisions: Decisions,
) -> Decisions:
    """Turn the trial's decisions into real ones: extras preempted become a shrink (or,
    for a job that may not be resized yet, a preemption of the whole job), then the idle
    GPUs are grown into."""
    now = snapshot.now
    shrunk_now = set(shrunk)
    preemptions: list[Preemption] = []
    whole: set[str] = set()
    for preemption in decisions.preemptions:
        job_id = preemption.job_id.removesuffix(EXTRAS)
        if preemption.job_id == job_id:
            whole.add(job_id)
            preemptions.append(preemption)
        elif may_resize(elastic[job_id], now):
            shrunk_now.add(job_id)
        else:
            whole.add(job_id)
            preemptions.append(replace(preemption, job_id=job_id))
    # One preemption per job (its extras' and its own may both have been chosen).
    first: dict[str, Preemption] = {}
    for preemption in preemptions:
        first.setdefault(preemption.job_id, preemption)
    decisions.preemptions = list(first.values())
    shrunk_now -= whole
    _grow(snapshot, elastic, shrunk_now, whole, decisions)
    return decisions


def _grow(
    snapshot: Snapshot,
    elastic: dict[str, RunningJob],
    shrunk: set[str],
    preempted: set[str],
    decisions: Decisions,
) -> None:
    now = snapshot.now
    # Every running job's workers, every start and every kept place are taken (a shrunk
    # job's workers until they are gone): what is left is idle.
    cluster = ClusterState.of(snapshot.nodes, snapshot.running, snapshot.placement)
    claimed: set[tuple[str, int]] = set()
    for start in decisions.starts:
        cluster.occupy(start.placement)
    for kept in decisions.claims.values():
        # Part of a kept place may still be held by jobs being stopped: what is free of
        # it is kept all the same (CPU and memory counted twice there: growth only).
        cluster.occupy(kept)
        claimed.update((worker.node, gpu) for worker in kept for gpu in worker.gpus)
    running = {job.id: job for job in snapshot.running}
    queued = {job.id: job for job in snapshot_with_pools(snapshot).queued}
    placements: dict[str, list[WorkerPlacement]] = {}
    growers: list[Grower] = []
    for start in decisions.starts:
        job = queued.get(start.job_id)
        if job is None or job.elastic is None:
            continue
        placements[job.id] = list(start.placement)
        order = (job.due if job.due is not None else float("inf"), job.queued_at, job.id)
        growers.append(Grower(order, job.id, job.shape, job.elastic, job.due))
    for runner in running.values():
        if runner.elastic is None or runner.id in preempted:
            continue
        if runner.id in shrunk:
            # It keeps the workers nobody claimed, and may grow beyond them.
            keep = runner.elastic.min_workers
            unclaimed = [
                worker
                for worker in runner.placement[keep:]
                if not any((worker.node, gpu) in claimed for gpu in worker.gpus)
            ]
            placements[runner.id] = [*runner.placement[:keep], *unclaimed]
        elif may_resize(runner, now):
            placements[runner.id] = list(runner.placement)
        else:
            continue
        due = runner.due if runner.due is not None else float("inf")
        order = (due, runner.queue_position, runner.id)
        growers.append(Grower(order, runner.id, runner.shape, runner.elastic, runner.due))
    if snapshot.borrowing:
        _hand_out(cluster, sorted(growers, key=lambda grower: grower.order), placements, now)
    by_start = {start.job_id: index for index, start in enumerate(decisions.starts)}
    for job_id, placement in placements.items():
        if job_id in by_start:
            index = by_start[job_id]
            decisions.starts[index] = Start(
                job_id, tuple(placement), decisions.starts[index].borrowing
            )
            continue
        resized = running[job_id]
        if tuple(placement) == resized.placement:
            continue
        if len(placement) < resized.shape.workers:
            reason = "shrunk for guaranteed work"
        else:
            reason = "grown into idle GPUs"
        decisions.resizes.append(Resize(job_id, tuple(placement), resized.shape.workers, reason))


class Grower(NamedTuple):
    """A job that may take more workers in this pass."""

    order: tuple[float, float, str]  # deadlines first, then queue order
    job_id: str
    shape: JobShape
    elastic: Elastic
    due: float | None

    @property
    def scales(self) -> bool:
        """Whether its curve and work left are known (jobmanager.core.deadlines)."""
        return bool(self.elastic.throughput) and self.elastic.work is not None


def _hand_out(
    cluster: ClusterState,
    growers: list[Grower],
    placements: dict[str, list[WorkerPlacement]],
    now: float,
) -> None:
    """Idle GPUs to the growers: first each deadline job's minimum satisfactory share
    (earliest deadline first), then further workers to the job with a curve that they
    shorten most per worker (a step that adds no throughput is not given; across a flat
    part of a curve, the workers up to the next faster size go as one gang), then one
    worker at a time round the jobs without a curve until none can grow."""
    for grower in growers:
        if grower.due is None or not grower.scales:
            continue
        elastic = grower.elastic
        share = satisfactory_share(
            elastic.throughput, elastic.work or 0.0, now, grower.due,
            elastic.min_workers, elastic.max_workers,
        )  # fmt: skip
        _add_workers(cluster, grower, placements[grower.job_id], share or 0)
    # Each job's ways to grow, worked out again only when it grows.
    steps_of = {g.job_id: _growth_steps(g, placements) for g in growers if g.scales}
    candidates = [grower for grower in growers if grower.scales]
    while candidates:
        best = max(candidates, key=lambda grower: _best_gain(steps_of[grower.job_id]))
        if _best_gain(steps_of[best.job_id]) <= 0:
            break
        for _, added in steps_of[best.job_id]:  # the best step that fits, as one gang
            placed = cluster.place(with_workers(best.shape, added))
            if placed:
                placements[best.job_id].extend(placed)
                steps_of[best.job_id] = _growth_steps(best, placements)
                break
        else:
            candidates.remove(best)  # no room where it may go
    growing = True
    while growing:
        growing = False
        for grower in growers:
            if not grower.scales and _add_workers(
                cluster, grower, placements[grower.job_id], len(placements[grower.job_id]) + 1
            ):
                growing = True


def _growth_steps(
    grower: Grower, placements: dict[str, list[WorkerPlacement]]
) -> list[tuple[float, int]]:
    elastic = grower.elastic
    workers = len(placements[grower.job_id])
    return growth_steps(elastic.throughput, elastic.work or 0.0, workers, elastic.max_workers)


def _best_gain(steps: list[tuple[float, int]]) -> float:
    return steps[0][0] if steps else 0.0


def _add_workers(
    cluster: ClusterState, grower: Grower, placement: list[WorkerPlacement], size: int
) -> bool:
    """Place workers for the job until it has ``size`` (at most its maximum); whether it
    grew at all."""
    grew = False
    while len(placement) < min(size, grower.elastic.max_workers):
        placed = cluster.place(with_workers(grower.shape, 1))
        if not placed:
            break
        placement.append(placed[0])
        grew = True
    return grew


def resized(job: RunningJob, resize: Resize, now: float) -> RunningJob:
    """The running job once the resize is applied."""
    shape = with_workers(job.shape, resize.workers_to)
    return replace(job, shape=shape, placement=resize.placement, resized_at=now)


def started_shape(job: QueuedJob, start: Start) -> JobShape:
    """The shape an elastic job starts with: as many workers as the start places."""
    return with_workers(job.shape, len(start.placement))
