"""Replay of elastic jobs with scaling curves and deadlines (issue 34).

Each job has work to do (iterations, samples: any unit) and a scaling curve, its
throughput at 1..N workers; it runs at the rate of its current size. The core
(:func:`jobmanager.core.elastic.schedule_elastic`) decides starts, preemptions and
resizes at every arrival and end, and at least every ``interval`` seconds while jobs
wait or could grow. A resize, and a start after a preemption, costs ``resize_cost(workers)``
seconds without progress (a restart from the last checkpoint, as ElasticFlow charges
it); a preempted job keeps the work it did (it checkpoints when stopped). Run fixed, the
same jobs ask for ``workers`` each and never change size.

Unlike :mod:`jobmanager.simulate.engine` (fixed durations, tens of thousands of jobs),
this replay builds each pass's snapshot afresh: it is for traces of hundreds of jobs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from jobmanager.core.deadlines import admit
from jobmanager.core.elastic import resized, schedule_elastic, started_shape
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    Decisions,
    Elastic,
    JobShape,
    Policy,
    QueuedJob,
    RunningJob,
    Snapshot,
)
from jobmanager.simulate.cluster import ClusterSpec, per_gpu, vc_states
from jobmanager.simulate.engine import ReplayError

_Job = TypeVar("_Job", QueuedJob, RunningJob)
DONE = 1e-6  # seconds of work left below which a job has ended (float rounding)
MAX_PASSES_PER_INSTANT = 8


@dataclass(frozen=True, slots=True)
class ElasticTraceJob:
    id: str
    vc: str
    submitted: float
    work: float  # in the unit of its throughput's numerator (iterations, samples)
    throughput: tuple[float, ...]  # work per second at 1, 2, ... workers
    workers: int  # the size it asks for when it runs fixed
    min_workers: int = 1
    max_workers: int | None = None  # None: as far as its curve goes
    gpus_per_worker: int = 1
    deadline: float | None = None

    @property
    def most_workers(self) -> int:
        return self.max_workers or len(self.throughput)

    def rate(self, workers: int) -> float:
        return self.throughput[min(workers, len(self.throughput)) - 1]


@dataclass(frozen=True)
class ElasticOptions:
    elastic: bool = True  # False: every job runs fixed at its workers
    interval: float = 60.0  # a pass at least this often while jobs wait or may grow
    min_resize_interval: float = 300.0
    resize_cost: Callable[[int], float] = lambda workers: 0.0
    policy: Policy = Policy.BACKFILL
    deadlines: bool = True  # the core sees each job's deadline (QueuedJob.due)
    # The core sees each elastic job's scaling curve and the work it has left
    # (Elastic.throughput, Elastic.work): deadline jobs get their minimum satisfactory
    # share first, then idle GPUs go where they shorten jobs most (jobmanager.core.deadlines).
    curves: bool = False
    # Admission at arrival (as a VC that accepts infeasible deadlines best-effort): a job
    # whose deadline the core says it cannot meet (jobmanager.core.deadlines.admit) runs
    # without it; it is still counted against it.
    admission: bool = False


@dataclass
class ElasticReplay:
    job_ids: list[str]
    submitted: list[float]
    deadlines: list[float | None]
    first_start: list[float | None]
    ended: list[float | None]
    resizes: list[int]
    preemptions: int = 0
    passes: int = 0
    sizes: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # (time, workers)
    best_effort: list[str] = field(default_factory=list)  # admitted without their deadline

    def met_deadlines(self) -> float:
        """The share of jobs with a deadline that ended by it (NaN: none had one)."""
        due = [i for i, deadline in enumerate(self.deadlines) if deadline is not None]
        met = [i for i in due if (end := self.ended[i]) is not None and end <= self.deadlines[i]]  # type: ignore[operator]
        return len(met) / len(due) if due else math.nan

    def mean_jct(self, only: list[int] | None = None) -> float:
        indices = range(len(self.job_ids)) if only is None else only
        times = [end - self.submitted[i] for i in indices if (end := self.ended[i]) is not None]
        return sum(times) / len(times) if times else math.nan


@dataclass
class _Progress:
    left: float
    paused_until: float = 0.0


def replay_elastic(
    jobs: list[ElasticTraceJob],
    cluster: ClusterSpec,
    quotas: dict[str, int],
    options: ElasticOptions | None = None,
) -> ElasticReplay:
    """Run every job to its end (ReplayError if some job can never start)."""
    options = options or ElasticOptions()
    jobs = sorted(jobs, key=lambda job: job.submitted)
    index_of = {job.id: index for index, job in enumerate(jobs)}
    by_id = {job.id: job for job in jobs}
    result = ElasticReplay(
        job_ids=[job.id for job in jobs],
        submitted=[job.submitted for job in jobs],
        deadlines=[job.deadline for job in jobs],
        first_start=[None] * len(jobs),
        ended=[None] * len(jobs),
        resizes=[0] * len(jobs),
    )
    nodes = cluster.node_states()
    vcs = vc_states(quotas, cluster, options.policy)
    queued: dict[str, QueuedJob] = {}
    running: dict[str, RunningJob] = {}
    progress = {job.id: _Progress(job.work) for job in jobs}
    best_effort: set[str] = set()  # admitted without their deadline (options.admission)
    decide = schedule_elastic if options.elastic else schedule
    now = jobs[0].submitted if jobs else 0.0
    next_job = 0
    last_pass = -math.inf

    def rate(job_id: str) -> float:
        return by_id[job_id].rate(running[job_id].shape.workers)

    def advance(to: float) -> None:
        for job_id in running:
            state = progress[job_id]
            ran = to - max(now, state.paused_until)
            if ran > 0:
                state.left -= ran * rate(job_id)

    def end_time(job_id: str) -> float:
        state = progress[job_id]
        return max(now, state.paused_until) + max(state.left, 0.0) / rate(job_id)

    def seen(explain: bool = True) -> Snapshot:
        """The cluster as the core sees it now (elastic jobs' curves and work left)."""
        ends = {job_id: end_time(job_id) for job_id in running}
        return Snapshot(
            now=now,
            nodes=nodes,
            vcs=vcs,
            running=tuple(_seen(job, by_id, progress, options, ends) for job in running.values()),
            queued=tuple(_seen(job, by_id, progress, options, ends) for job in queued.values()),
            explain=explain,
        )

    while next_job < len(jobs) or queued or running:
        events = [end_time(job_id) for job_id in running]
        if next_job < len(jobs):
            events.append(jobs[next_job].submitted)
        if queued or (options.elastic and running):
            events.append(max(now, last_pass + options.interval))
        later = min(events)
        advance(later)
        now = later
        changed = False
        # Done: no work left, or too little to move the clock (float rounding).
        for job_id in [job_id for job_id in running if end_time(job_id) <= now + DONE]:
            del running[job_id]
            result.ended[index_of[job_id]] = now
            changed = True
        while next_job < len(jobs) and jobs[next_job].submitted <= now:
            arrival = jobs[next_job]
            candidate = _queued(arrival, options, cluster.gpu_type)
            if (
                options.admission
                and candidate.due is not None
                and not admit(seen(), candidate, arrival.throughput, arrival.work).feasible
            ):
                best_effort.add(arrival.id)
                result.best_effort.append(arrival.id)
                candidate = replace(candidate, due=None)
            queued[arrival.id] = candidate
            next_job += 1
            changed = True
        if changed or now >= last_pass + options.interval:
            last_pass = now
            for _ in range(MAX_PASSES_PER_INSTANT):
                snapshot = seen(explain=False)
                decisions = decide(snapshot)
                result.passes += 1
                again = _apply(
                    decisions, now, queued, running, progress, result, index_of, by_id, options
                )
                for job_id in best_effort.intersection(queued):  # requeued: still without it
                    queued[job_id] = replace(queued[job_id], due=None)
                if not again:
                    break
            if queued and not running and next_job >= len(jobs):
                stuck = ", ".join(sorted(queued)[:5])
                raise ReplayError(f"{len(queued)} job(s) can never start (first: {stuck})")
    return result


def _seen(
    job: _Job,
    by_id: dict[str, ElasticTraceJob],
    progress: dict[str, _Progress],
    options: ElasticOptions,
    ends: dict[str, float],
) -> _Job:
    """The job as the core sees it: with ``options.curves``, an elastic job carries its
    curve and the work it has left, and a running job ends when that work at its size
    says (not when its run at its minimum would have)."""
    if not options.curves or job.elastic is None:
        return job
    curve = by_id[job.id].throughput
    elastic = replace(job.elastic, throughput=curve, work=max(progress[job.id].left, 0.0))
    if isinstance(job, RunningJob):
        return replace(job, elastic=elastic, expected_end=ends[job.id])
    return replace(job, elastic=elastic)


def _queued(job: ElasticTraceJob, options: ElasticOptions, gpu_type: str) -> QueuedJob:
    elastic = None
    workers = job.workers
    if options.elastic and job.min_workers < job.most_workers:
        elastic = Elastic(job.min_workers, job.most_workers, options.min_resize_interval)
        workers = job.most_workers
    return QueuedJob(
        job.id,
        job.vc,
        JobShape(gpu_type, workers, per_gpu(job.gpus_per_worker)),
        queued_at=job.submitted,
        due=job.deadline if options.deadlines else None,
        expected_duration=job.work / job.rate(job.min_workers if elastic else job.workers),
        elastic=elastic,
    )


def _apply(
    decisions: Decisions,
    now: float,
    queued: dict[str, QueuedJob],
    running: dict[str, RunningJob],
    progress: dict[str, _Progress],
    result: ElasticReplay,
    index_of: dict[str, int],
    by_id: dict[str, ElasticTraceJob],
    options: ElasticOptions,
) -> bool:
    """Apply the decisions at once (a simulated cluster stops and resizes jobs with no
    delay); True when another pass at this instant may start more."""
    again = False
    for preemption in decisions.preemptions:
        stopped = running.pop(preemption.job_id, None)
        if stopped is None:
            continue
        queued[stopped.id] = replace(
            _queued(by_id[stopped.id], options, stopped.shape.gpu_type),
            queued_at=stopped.queue_position,
            waiting_since=now,
        )
        result.preemptions += 1
        again = True
    for resize in decisions.resizes:
        runner = running[resize.job_id]
        running[runner.id] = resized(runner, resize, now)
        result.resizes[index_of[runner.id]] += 1
        progress[runner.id].paused_until = now + options.resize_cost(resize.workers_to)
        result.sizes.setdefault(runner.id, []).append((now, resize.workers_to))
        again = again or resize.workers_to < resize.workers_from
    for start in decisions.starts:
        job = queued.pop(start.job_id)
        index = index_of[job.id]
        if result.first_start[index] is None:
            result.first_start[index] = now
        else:
            progress[job.id].paused_until = now + options.resize_cost(len(start.placement))
        running[job.id] = RunningJob(
            job.id,
            job.vc,
            started_shape(job, start),
            start.placement,
            started_at=now,
            borrowing=start.borrowing,
            queued_at=job.queued_at,
            due=job.due,
            elastic=job.elastic,
            expected_end=now + (job.expected_duration or 0.0),
        )
        result.sizes.setdefault(job.id, []).append((now, len(start.placement)))
    for job_id, job in queued.items():  # places kept by this pass, for the next
        queued[job_id] = replace(job, reserved=decisions.claims.get(job_id, ()))
    return again
