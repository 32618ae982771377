"""A cluster in simulated time: the same core run forward over jobs that start and end.

Used by the trace simulator, and by the live system to estimate when waiting jobs start
(as Slurm's ``squeue --start`` does: running jobs end at their wall-time limits).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from jobmanager.core.placement import ClusterState
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    Decisions,
    NodeState,
    Placement,
    QueuedJob,
    RunningJob,
    Snapshot,
    VcState,
    WorkerPlacement,
)


@dataclass
class SimulatedCluster:
    """Nodes, VCs, running and queued jobs, changed only by decisions and job ends.

    ``run_time`` says how long a job runs once started (from its start; a preempted job
    starts its full run again, unless the caller's function says otherwise).
    """

    nodes: tuple[NodeState, ...]
    vcs: tuple[VcState, ...]
    run_time: Callable[[QueuedJob], float]
    placement: Placement = Placement.PACK
    starvation_seconds: float = 3600.0
    running: dict[str, RunningJob] = field(default_factory=dict)
    queued: dict[str, QueuedJob] = field(default_factory=dict)
    # Ends of running jobs as (time, job id, start time), a job's entry stale once it stops.
    ends: list[tuple[float, str, float]] = field(default_factory=list)
    specs: dict[str, QueuedJob] = field(default_factory=dict)
    preemptions: int = 0
    # Places the last pass kept for waiting jobs, handed to the next pass.
    reserved: dict[str, tuple[WorkerPlacement, ...]] = field(default_factory=dict)
    explain: bool = True  # False: passes give no reasons to wait (faster)
    # Free capacity with the running jobs taken, kept up to date as jobs start and end,
    # so that a pass need not rebuild it from every running job.
    free: ClusterState = field(init=False)

    def __post_init__(self) -> None:
        self.free = ClusterState.of(self.nodes, self.running.values(), self.placement)

    def submit(self, job: QueuedJob) -> None:
        self.queued[job.id] = job
        self.specs[job.id] = job

    def add_running(self, job: RunningJob, ends_at: float, spec: QueuedJob) -> None:
        self.running[job.id] = job
        self.specs[job.id] = spec
        self.free.occupy(job.placement)
        heapq.heappush(self.ends, (ends_at, job.id, job.started_at))

    def snapshot(self, now: float) -> Snapshot:
        return Snapshot(
            now=now,
            nodes=self.nodes,
            vcs=self.vcs,
            running=tuple(self.running.values()),
            queued=tuple(
                replace(job, reserved=self.reserved[job.id]) if job.id in self.reserved else job
                for job in self.queued.values()
            ),
            placement=self.placement,
            starvation_seconds=self.starvation_seconds,
            explain=self.explain,
        )

    def schedule(self, now: float) -> Decisions:
        """One scheduling pass at ``now`` (not applied)."""
        return schedule(self.snapshot(now), self.free)

    def step(self, now: float, max_passes: int = 4) -> Decisions:
        """Passes at ``now`` until one preempts nothing (at most ``max_passes``), merged:
        preemptions take effect at once, and since they free what a guaranteed job waits
        for, the next pass starts it (in the place kept for it). The waits and the places
        kept are those of the last pass."""
        decisions = self.schedule(now)
        self.apply(decisions, now)
        latest = decisions
        for _ in range(max_passes - 1):
            if not latest.preemptions:
                break
            latest = self.schedule(now)
            self.apply(latest, now)
            decisions.starts.extend(latest.starts)
            decisions.preemptions.extend(latest.preemptions)
            decisions.waits = latest.waits
            decisions.claims = latest.claims
        return decisions

    def apply(self, decisions: Decisions, now: float) -> None:
        self.reserved = dict(decisions.claims)
        for preemption in decisions.preemptions:
            victim = self.running.pop(preemption.job_id, None)
            if victim is not None:
                self.free.release(victim.placement)
                self.queued[victim.id] = self.specs[victim.id]  # keeps its queue place
                self.preemptions += 1
        for start in decisions.starts:
            job = self.queued.pop(start.job_id)
            self.free.occupy(start.placement)
            self.running[job.id] = RunningJob(
                id=job.id,
                vc=job.vc,
                shape=job.shape,
                placement=start.placement,
                started_at=now,
                priority=job.priority,
                preemptible=job.preemptible,
                borrowing=start.borrowing,
                interactive=job.interactive,
                queued_at=job.queued_at,
            )
            heapq.heappush(self.ends, (now + self.run_time(job), job.id, now))

    def next_end(self) -> float | None:
        """When the next running job ends (stale entries of stopped jobs dropped)."""
        while self.ends:
            at, job_id, started_at = self.ends[0]
            job = self.running.get(job_id)
            if job is not None and job.started_at == started_at:
                return at
            heapq.heappop(self.ends)
        return None

    def finish_until(self, now: float) -> list[RunningJob]:
        """End every running job whose end is at or before ``now``; return them."""
        finished: list[RunningJob] = []
        while (at := self.next_end()) is not None and at <= now:
            _, job_id, _ = heapq.heappop(self.ends)
            job = self.running.pop(job_id)
            self.free.release(job.placement)
            finished.append(job)
        return finished


def estimate_start_times(
    snapshot: Snapshot,
    default_run_time: float,
    horizon: float = 7 * 24 * 3600.0,
    max_passes: int = 200,
) -> dict[str, float]:
    """When each queued job would start if every running job ran to its wall-time limit
    (one without a limit runs ``default_run_time`` from its start) and nothing else were
    submitted; jobs that would not start within the horizon (or the pass budget) are
    left out."""

    def run_time(job: QueuedJob) -> float:
        return job.max_wall_time or default_run_time

    cluster = SimulatedCluster(
        snapshot.nodes,
        snapshot.vcs,
        run_time,
        placement=snapshot.placement,
        starvation_seconds=snapshot.starvation_seconds,
        explain=False,
    )
    for job in snapshot.queued:
        cluster.submit(job)
    for running in snapshot.running:
        ends_at = running.deadline
        if ends_at is None:
            ends_at = running.started_at + default_run_time
        if running.releasing:
            ends_at = snapshot.now
        cluster.add_running(
            replace(running, releasing=False), max(ends_at, snapshot.now), running.as_queued()
        )

    waiting = {job.id for job in snapshot.queued}
    starts: dict[str, float] = {}
    now = snapshot.now
    for _ in range(max_passes):
        cluster.finish_until(now)
        for start in cluster.step(now).starts:
            if start.job_id in waiting:
                starts[start.job_id] = now
                waiting.discard(start.job_id)
        next_end = cluster.next_end()
        if not waiting or next_end is None or next_end > snapshot.now + horizon:
            break
        now = next_end
    return starts
