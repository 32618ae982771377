"""Event-driven replay of a trace on a simulated cluster, driven by the scheduling core.

Simulated time jumps from event to event (submissions and job ends). At each instant
where something changed and jobs wait, the core's :func:`schedule` decides on a
snapshot of :class:`SimulatedCluster` and the decisions are applied, as the live job
manager does. A preempted job goes back to the head of its queue (the core keeps its
submission time) and, when it starts again, runs again what it had not checkpointed.

Without ``oracle`` the scheduler never sees a trace job's duration: backfill plans by a
run-time estimate learned online from the jobs that have ended (RunTimeEstimator).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from jobmanager.core.estimates import RunTimeEstimator
from jobmanager.core.snapshot import (
    LAS_STARVATION_SECONDS,
    LAS_STARVE_FACTOR,
    LAS_THRESHOLDS,
    RF_STARVATION_SECONDS,
    JobShape,
    Placement,
    Policy,
    QueuedJob,
)
from jobmanager.core.timeline import SimulatedCluster
from jobmanager.simulate.bursts import BurstService
from jobmanager.simulate.cluster import ClusterSpec, vc_states
from jobmanager.simulate.trace import Trace

# Passes at one instant go on while they preempt (each starts the jobs the one before
# preempted for); jobs preempted again at the same instant more often than this mean
# the core does not settle.
MAX_PASSES_PER_INSTANT = 16


class ReplayError(RuntimeError):
    """The replay could not go on (the core left jobs waiting forever or did not settle)."""


@dataclass(frozen=True)
class ReplayOptions:
    """How a replay treats the trace's jobs, beyond policy and placement."""

    borrowing: bool = True  # VCs lend idle quota (False: jobs beyond quota wait)
    fair_lending: bool = False  # lend to the VC borrowing least for its quota first
    preemptible: bool = False  # every trace job may be preempted (as Tiresias assumes)
    checkpoint_interval: float | None = None  # seconds; None: a preempted job restarts
    # Seconds a preempted job spends, once restarted, before it makes progress again
    # (container start, loading its checkpoint): counted as running, not as work done.
    restart_overhead: float = 0.0
    oracle: bool = False  # backfill knows each duration in advance (no real scheduler does)
    las_thresholds: tuple[float, ...] = LAS_THRESHOLDS
    las_quantum: float = 1800.0
    las_starve_factor: float = LAS_STARVE_FACTOR
    las_starvation_seconds: float = LAS_STARVATION_SECONDS
    las_wait_limit: float | None = None  # seconds queued in all before a job is overdue
    las_wait_factor: float | None = None  # or this many times its expected wait
    las_limit_preempted_only: bool = False  # the wait limit binds preempted jobs only
    las_within_queue: bool = False  # LAS preempts later-submitted jobs of the same queue
    deadline_factor: float | None = None  # jobs get deadline = submit + factor x duration
    # Backfill by bursts (jobmanager.core.bursts): a job joins its kind's burst if
    # submitted within this many seconds of the one before; None: off.
    bursts: float | None = None
    burst_guard: float = 24 * 3600.0
    largest_fit_first: bool = False  # backfill starts the largest job that fits first
    # A gang under more than one network switch runs this many times slower (the cluster
    # needs switches: ClusterSpec.nodes_per_switch).
    straddle_slowdown: float = 1.0
    same_switch: bool = False  # every gang that fits under one switch waits for one
    topology_aware: bool = True  # False: placement is not told the switches


@dataclass
class Replay:
    """What happened to every job of one run, in the trace's order."""

    trace_name: str
    policy: Policy
    placement: Placement
    cluster: ClusterSpec
    quotas: dict[str, int]
    job_ids: list[str]
    submitted: list[float]
    gpus: list[int]  # GPUs held while running (a gang rounded up to whole nodes)
    first_start: list[float | None]
    ended: list[float | None]
    starts: list[int]  # 1 + the times the job was preempted, once completed
    # Seconds each job held its GPUs, over all its starts (its JCT less this is the time
    # it spent queued, every wait after a preemption included).
    held: list[float] = field(default_factory=list)
    deadlines: list[float | None] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    users: list[str] = field(default_factory=list)  # "" where the trace names none
    unplaceable: list[str] = field(default_factory=list)  # larger than the whole cluster
    busy_gpu_seconds: float = 0.0
    preemptions: int = 0
    passes: int = 0
    wall_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0  # work preemptions threw away (since last checkpoints)
    busy_in_window: float = 0.0  # busy GPU-seconds from the first submission to the last
    gang_starts: int = 0  # starts of gangs on more than one node
    straddled_starts: int = 0  # of those, under more than one network switch

    @property
    def label(self) -> str:
        return f"{self.policy.value}+{self.placement.value}"


def replay(
    trace: Trace,
    cluster: ClusterSpec,
    quotas: dict[str, int],
    policy: Policy,
    placement: Placement,
    *,
    interval: float = 0.0,
    starvation_seconds: float = RF_STARVATION_SECONDS,
    on_progress: Callable[[int], None] | None = None,
    options: ReplayOptions | None = None,
) -> Replay:
    """Run every job of the trace to completion; ``on_progress(n)`` hears of n more ended.

    ``interval`` > 0 runs the scheduler only at multiples of it (as a periodic trigger
    with collapsed events would), which trades a little queueing delay for fewer passes;
    0 runs it at every instant where something changed.
    """
    wall_start = time.perf_counter()
    options = options or ReplayOptions()
    jobs = [job for job in trace.jobs if cluster.fits(job)]
    shapes = {gpus: _shape(cluster, gpus, options) for gpus in {job.gpus for job in jobs}}
    result = Replay(
        trace_name=trace.name,
        policy=policy,
        placement=placement,
        cluster=cluster,
        quotas=dict(quotas),
        job_ids=[job.id for job in jobs],
        submitted=[job.submitted for job in jobs],
        gpus=[shapes[job.gpus].total.gpus for job in jobs],
        first_start=[None] * len(jobs),
        ended=[None] * len(jobs),
        starts=[0] * len(jobs),
        held=[0.0] * len(jobs),
        deadlines=[
            job.submitted + options.deadline_factor * job.duration
            if options.deadline_factor is not None
            else None
            for job in jobs
        ],
        durations=[job.duration for job in jobs],
        users=[job.user for job in jobs],
        unplaceable=[job.id for job in trace.jobs if not cluster.fits(job)],
    )
    index_of = {job.id: index for index, job in enumerate(jobs)}
    if len(index_of) != len(jobs):
        raise ReplayError(f"trace {trace.name} repeats job ids")
    durations = [job.duration for job in jobs]
    estimator = RunTimeEstimator()

    def expect(queued: QueuedJob) -> float | None:
        index = index_of[queued.id]
        if options.oracle:
            return durations[index]
        return estimator.estimate(queued.vc, queued.user, jobs[index].gpus)

    bursts = BurstService(options.bursts) if options.bursts is not None else None
    burst_of: dict[str, str] = {}
    nodes = cluster.node_states()
    switches = None
    if not options.topology_aware:
        switches = {node.name: node.switch for node in nodes}
        nodes = tuple(replace(node, switch="") for node in nodes)
    sim = SimulatedCluster(
        nodes=nodes,
        switches=switches,
        vcs=vc_states(quotas, cluster, policy),
        run_time=lambda queued: durations[index_of[queued.id]],
        placement=placement,
        starvation_seconds=starvation_seconds,
        explain=False,
        expect=expect,
        restart_overhead=options.restart_overhead,
        straddle_slowdown=options.straddle_slowdown,
        options={
            "borrowing": options.borrowing,
            "fair_lending": options.fair_lending,
            "las_thresholds": options.las_thresholds,
            "las_quantum": options.las_quantum,
            "las_starve_factor": options.las_starve_factor,
            "las_starvation_seconds": options.las_starvation_seconds,
            "las_wait_limit": options.las_wait_limit,
            "las_wait_factor": options.las_wait_factor,
            "las_limit_preempted_only": options.las_limit_preempted_only,
            "las_within_queue": options.las_within_queue,
            "largest_fit_first": options.largest_fit_first,
            **(
                {"burst_service": bursts, "burst_guard": options.burst_guard}
                if bursts is not None
                else {}
            ),
        },
    )

    busy_gpus = 0
    first_submit = jobs[0].submitted if jobs else 0.0
    last_submit = jobs[-1].submitted if jobs else 0.0
    last_event = first_submit
    next_job = 0
    pass_at = math.inf
    while True:
        next_submit = jobs[next_job].submitted if next_job < len(jobs) else math.inf
        next_end = sim.next_end()
        now = min(next_submit, math.inf if next_end is None else next_end, pass_at)
        if now == math.inf:
            break
        result.busy_gpu_seconds += busy_gpus * (now - last_event)
        overlap = min(now, last_submit) - max(last_event, first_submit)
        if overlap > 0:
            result.busy_in_window += busy_gpus * overlap
        last_event = now

        changed = False
        finished = sim.finish_until(now)
        for job in finished:
            index = index_of[job.id]
            result.ended[index] = now
            result.held[index] += now - job.started_at
            busy_gpus -= result.gpus[index]
            estimator.observe(job.vc, job.user, jobs[index].gpus, durations[index])
            if bursts is not None:
                bursts.stopped(burst_of[job.id], job.id, now, ended=True)
            changed = True
        while next_job < len(jobs) and jobs[next_job].submitted <= now:
            arrival = jobs[next_job]
            queued = QueuedJob(
                arrival.id,
                arrival.vc,
                shapes[arrival.gpus],
                queued_at=arrival.submitted,
                preemptible=options.preemptible,
                user=arrival.user,
                checkpoint_interval=options.checkpoint_interval,
                due=result.deadlines[next_job],
                burst=bursts.join(arrival.vc, arrival.user, arrival.gpus, arrival.submitted)
                if bursts is not None
                else "",
            )
            burst_of[arrival.id] = queued.burst
            queued = replace(queued, expected_duration=expect(queued))
            if options.las_wait_factor is not None:
                queued = replace(queued, expected_wait=_expected_wait(sim, queued, quotas, now))
            sim.submit(queued)
            next_job += 1
            changed = True
        if changed and sim.queued:
            pass_at = min(pass_at, _tick(now, interval))
        if now >= pass_at:
            pass_at = math.inf
            if bursts is not None:
                bursts.now = now
            busy_gpus += _schedule_until_settled(sim, now, result, index_of, bursts, burst_of)
        if finished and on_progress is not None:
            on_progress(len(finished))

    if sim.queued or sim.running:
        stuck = ", ".join(sorted(sim.queued)[:5])
        raise ReplayError(
            f"{len(sim.queued)} job(s) never started (first: {stuck}); the core left them "
            "waiting with nothing running and nothing left to submit"
        )
    result.preemptions = sim.preemptions
    result.lost_gpu_seconds = sim.lost_gpu_seconds
    result.gang_starts = sim.gang_starts
    result.straddled_starts = sim.straddled_starts
    result.wall_seconds = time.perf_counter() - wall_start
    return result


def _shape(cluster: ClusterSpec, gpus: int, options: ReplayOptions) -> JobShape:
    shape = cluster.shape(gpus)
    one_switch = options.same_switch and shape.workers <= cluster.nodes_per_switch
    return replace(shape, same_switch=one_switch) if one_switch else shape


def _expected_wait(
    sim: SimulatedCluster, job: QueuedJob, quotas: dict[str, int], now: float
) -> float:
    """How long the job can expect to wait, as the scheduler sees it at its submission:
    the GPU-seconds of its VC's queued jobs (by their expected run times; none known:
    nothing) and what its running jobs are expected to run still, over the VC's GPUs."""
    work = sum(
        queued.shape.total.gpus * (queued.expected_duration or 0.0)
        for queued in sim.queued.values()
        if queued.vc == job.vc and queued.id != job.id
    )
    work += sum(
        running.shape.total.gpus * max(0.0, running.expected_end - now)
        for running in sim.running.values()
        if running.vc == job.vc and running.expected_end is not None
    )
    return work / max(quotas.get(job.vc, 0), 1)


def _tick(now: float, interval: float) -> float:
    if interval <= 0:
        return now
    return math.ceil(now / interval) * interval


def _schedule_until_settled(
    sim: SimulatedCluster,
    now: float,
    result: Replay,
    index_of: dict[str, int],
    bursts: BurstService | None = None,
    burst_of: dict[str, str] | None = None,
) -> int:
    """Run passes at ``now`` until one preempts nothing; return the change in busy GPUs.

    A pass that preempts borrowers frees their GPUs at once (the simulated cluster has no
    grace period), and the next pass starts the jobs they were preempted for.
    """
    change = 0
    preempted: set[str] = set()
    repeats = 0
    while True:
        decisions = sim.schedule(now)
        result.passes += 1
        for preemption in decisions.preemptions:
            if preemption.job_id in sim.running:
                change -= result.gpus[index_of[preemption.job_id]]
                result.held[index_of[preemption.job_id]] += (
                    now - sim.running[preemption.job_id].started_at
                )
                if bursts is not None and burst_of is not None:
                    bursts.stopped(burst_of[preemption.job_id], preemption.job_id, now, False)
            if preemption.job_id in preempted:
                repeats += 1
            preempted.add(preemption.job_id)
        sim.apply(decisions, now)
        for start in decisions.starts:
            index = index_of[start.job_id]
            if result.first_start[index] is None:
                result.first_start[index] = now
            result.starts[index] += 1
            change += result.gpus[index]
            if bursts is not None and burst_of is not None:
                bursts.started(burst_of[start.job_id], start.job_id, now)
        if not decisions.preemptions:
            return change
        if repeats > MAX_PASSES_PER_INSTANT:
            raise ReplayError(
                f"the scheduler preempted the same jobs again and again at t={now}: "
                "it does not settle"
            )
