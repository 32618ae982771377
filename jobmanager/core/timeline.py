"""A cluster in simulated time: the same core run forward over jobs that start and end.

Used by the trace simulator, and by the live system to estimate when waiting jobs start
(as Slurm's ``squeue --start`` does: running jobs end at their wall-time limits).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from jobmanager.core.dedication import dedicated_vcs, lenders, with_pools
from jobmanager.core.placement import ClusterState
from jobmanager.core.queues import QueueBook
from jobmanager.core.running import RunningSummary
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    LAS_THRESHOLDS,
    RF_STARVATION_SECONDS,
    Decisions,
    NodeState,
    Placement,
    QueuedJob,
    RunningJob,
    Snapshot,
    VcState,
    WorkerPlacement,
)
from jobmanager.core.topology import switches_of


@dataclass
class SimulatedCluster:
    """Nodes, VCs, running and queued jobs, changed only by decisions and job ends.

    ``run_time`` says how long a job runs once started (from its start; a preempted job
    runs again what it did not save: everything, or what it ran since its last
    checkpoint). ``expect`` gives a starting job's expected run time (none: its
    ``expected_duration``), from which its expected end is set. ``options`` are Snapshot
    fields set for every pass (LAS thresholds, fair lending, borrowing).
    """

    nodes: tuple[NodeState, ...]
    vcs: tuple[VcState, ...]
    run_time: Callable[[QueuedJob], float]
    placement: Placement = Placement.PACK
    starvation_seconds: float = RF_STARVATION_SECONDS
    running: dict[str, RunningJob] = field(default_factory=dict)
    queued: dict[str, QueuedJob] = field(default_factory=dict)
    # Ends of running jobs as (time, job id, start time), a job's entry stale once it stops.
    ends: list[tuple[float, str, float]] = field(default_factory=list)
    specs: dict[str, QueuedJob] = field(default_factory=dict)
    preemptions: int = 0
    # Places the last pass kept for waiting jobs, handed to the next pass.
    reserved: dict[str, tuple[WorkerPlacement, ...]] = field(default_factory=dict)
    explain: bool = True  # False: passes give no reasons to wait (faster)
    expect: Callable[[QueuedJob], float | None] | None = None
    options: dict[str, object] = field(default_factory=dict)
    usage_half_life: float = 7 * 24 * 3600.0  # fair share: past usage halves this often
    saved: dict[str, float] = field(default_factory=dict)  # work kept over preemptions
    # A preempted job, started again, runs this much longer before it makes progress
    # (its container starts and loads its checkpoint).
    restart_overhead: float = 0.0
    lost_gpu_seconds: float = 0.0  # work preemption threw away
    # A gang whose workers are under more than one network switch runs this many times
    # slower (its collectives cross the spine); 1: the network is flat.
    straddle_slowdown: float = 1.0
    # Each node's switch, where the placement is not told them (to measure what placing
    # blind to the network costs); None: the nodes' own.
    switches: dict[str, str] | None = None
    gang_starts: int = 0  # starts of gangs on more than one node
    straddled_starts: int = 0  # of those, the ones under more than one switch
    # Free capacity with the running jobs taken, kept up to date as jobs start and end,
    # so that a pass need not rebuild it from every running job.
    free: ClusterState = field(init=False)
    book: QueueBook = field(init=False)
    summary: RunningSummary = field(init=False)
    # Decayed usage by (VC, user), stored scaled by 2 ** (time / half-life).
    _usage: dict[tuple[str, str], float] = field(init=False)
    _fair: bool = field(init=False, default=False)
    # The VCs with dedicated nodes, and those lending them (jobmanager.core.dedication).
    _dedicated: frozenset[str] = field(init=False, default=frozenset())
    _lending: tuple[str, ...] = field(init=False, default=())
    _switch_of: dict[str, str] = field(init=False, default_factory=dict)
    _slowdown: dict[str, float] = field(init=False, default_factory=dict)  # this attempt's

    def __post_init__(self) -> None:
        self.free = ClusterState.of(self.nodes, self.running.values(), self.placement)
        self.summary = RunningSummary.of(self.running.values())
        thresholds = self.options.get("las_thresholds", LAS_THRESHOLDS)
        self.book = QueueBook(self.vcs, thresholds)  # type: ignore[arg-type]
        self._usage = defaultdict(float)
        self._fair = any(vc.policy.shares_fairly for vc in self.vcs)
        self._dedicated = dedicated_vcs(self.nodes)
        self._lending = lenders(self.vcs)
        switches = self.switches
        if switches is None:
            switches = {node.name: node.switch for node in self.nodes}
        # A network of no known switches is flat: nothing straddles.
        self._switch_of = switches if any(switches.values()) else {}

    def submit(self, job: QueuedJob) -> None:
        if self._dedicated:
            job = with_pools(job, self._lending, self._dedicated)
        self.queued[job.id] = job
        self.specs[job.id] = job
        if job.vc in self.book.policies:
            self.book.add(job)

    def add_running(self, job: RunningJob, ends_at: float, spec: QueuedJob) -> None:
        self.running[job.id] = job
        self.summary.add(job)
        self.specs[job.id] = spec
        self.free.occupy(job.placement)
        heapq.heappush(self.ends, (ends_at, job.id, job.started_at))

    def snapshot(self, now: float, queued: bool = True) -> Snapshot:
        """The snapshot a pass at ``now`` sees (``queued`` False: without the queue,
        which the pass then reads from ``book``)."""
        return Snapshot(
            now=now,
            nodes=self.nodes,
            vcs=self.vcs,
            running=tuple(self.running.values()),
            queued=tuple(
                replace(job, reserved=self.reserved[job.id]) if job.id in self.reserved else job
                for job in self.queued.values()
            )
            if queued
            else self._unbooked(),
            placement=self.placement,
            starvation_seconds=self.starvation_seconds,
            explain=self.explain,
            usage=self.usage_at(now) if self._fair else {},
            **self.options,  # type: ignore[arg-type]
        )

    def _unbooked(self) -> tuple[QueuedJob, ...]:
        """The queued jobs of no VC the book knows (the book holds all the others)."""
        if len(self.queued) == len(self.book):
            return ()
        return tuple(job for job in self.queued.values() if job.vc not in self.book.policies)

    def usage_at(self, now: float) -> dict[tuple[str, str], float]:
        scale = 2.0 ** (-now / self.usage_half_life)
        return {key: value * scale for key, value in self._usage.items()}

    def _use(self, job: RunningJob, now: float) -> None:
        if self._fair:
            gpu_seconds = job.shape.total.gpus * max(0.0, now - job.started_at)
            self._usage[(job.vc, job.user)] += gpu_seconds * 2.0 ** (now / self.usage_half_life)

    def schedule(self, now: float) -> Decisions:
        """One scheduling pass at ``now`` (not applied)."""
        return schedule(self.snapshot(now, queued=False), self.free, self.book, self.summary)

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
        for job_id in self.reserved.keys() - decisions.claims.keys():
            if job_id in self.book:
                self.book.add(replace(self.queued[job_id], reserved=()))
        self.reserved = dict(decisions.claims)
        for preemption in decisions.preemptions:
            victim = self.running.pop(preemption.job_id, None)
            if victim is not None:
                self.summary.remove(victim)
                self.free.release(victim.placement)
                self._use(victim, now)
                ran = max(0.0, now - victim.started_at)
                kept = victim.last_checkpoint(now) - victim.started_at
                if victim.id in self.saved:  # a restart: its first moments saved nothing
                    kept = max(0.0, kept - self.restart_overhead)
                # Work saved, in seconds of an attempt at full speed.
                kept_work = kept / self._slowdown.pop(victim.id, 1.0)
                self.saved[victim.id] = self.saved.get(victim.id, 0.0) + kept_work
                self.lost_gpu_seconds += (ran - kept) * victim.shape.total.gpus
                # It keeps its queue place, and carries what it ran (least attained
                # service) and when it began to wait again.
                spec = replace(
                    self.specs[victim.id],
                    attained=victim.attained_at(now),
                    waiting_since=now,
                )
                self.specs[victim.id] = spec
                self.queued[victim.id] = spec
                if spec.vc in self.book.policies:
                    self.book.add(spec)
                self.preemptions += 1
        for start in decisions.starts:
            job = self.queued.pop(start.job_id)
            if job.id in self.book:
                self.book.remove(job.id)
            self.free.occupy(start.placement)
            expected = self.expect(job) if self.expect is not None else job.expected_duration
            running = self.running[job.id] = RunningJob(
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
                user=job.user,
                expected_end=None if expected is None else now + expected,
                attained=job.attained,
                checkpoint_interval=job.checkpoint_interval,
                due=job.due,
                expected_wait=job.expected_wait,
            )
            self.summary.add(running)
            remaining = max(0.0, self.run_time(job) - self.saved.get(job.id, 0.0))
            remaining *= self._slowdown_of(job.id, start.placement)
            if job.id in self.saved:  # preempted before: it restarts first
                remaining += self.restart_overhead
            heapq.heappush(self.ends, (now + remaining, job.id, now))
        for job_id, placement in decisions.claims.items():
            if job_id in self.book:
                self.book.add(replace(self.queued[job_id], reserved=placement))

    def _slowdown_of(self, job_id: str, placement: tuple[WorkerPlacement, ...]) -> float:
        """How much slower the attempt runs where it was placed (counted as it starts)."""
        if len({worker.node for worker in placement}) < 2:
            return 1.0
        self.gang_starts += 1
        if not self._switch_of or switches_of(self._switch_of, placement) < 2:
            return 1.0
        self.straddled_starts += 1
        self._slowdown[job_id] = self.straddle_slowdown
        return self.straddle_slowdown

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
            self.summary.remove(job)
            self.free.release(job.placement)
            self._use(job, at)
            self.saved.pop(job_id, None)
            self._slowdown.pop(job_id, None)
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


def forecast_deadlines(
    snapshot: Snapshot,
    starts: dict[str, float],
    horizon: float = 7 * 24 * 3600.0,
) -> dict[str, bool | None]:
    """Whether each job with a deadline is predicted to finish by it, from ``starts``
    (estimate_start_times): a queued job ends its expected run time (its wall time when
    none is learned) after its estimated start; a running job at its expected end. A
    queued job with no estimated start misses a deadline within the horizon; past the
    horizon nothing is predicted (None)."""
    forecast: dict[str, bool | None] = {}
    for job in snapshot.queued:
        if job.due is None:
            continue
        start = starts.get(job.id)
        run = job.expected_duration or job.max_wall_time or 0.0
        if start is not None:
            forecast[job.id] = start + run <= job.due
        else:
            forecast[job.id] = False if job.due <= snapshot.now + horizon else None
    for running in snapshot.running:
        if running.due is None or running.releasing:
            continue
        ends = running.expected_end if running.expected_end is not None else running.deadline
        forecast[running.id] = None if ends is None else ends <= running.due
    return forecast
