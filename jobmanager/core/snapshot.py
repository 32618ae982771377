"""What the scheduler sees (a snapshot) and what it decides, as frozen dataclasses.

CPU is counted in millicores and memory in MiB, so that every sum is an exact integer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Policy(StrEnum):
    FIFO = "FIFO"  # the head of a VC's queue blocks the jobs behind it
    RF = "RF"  # runnable first: a job that cannot start lets smaller ones by
    # Backfill with reservations (EASY): the first job that cannot start gets a place at
    # its earliest start from running jobs' expected ends; later jobs start now only if
    # they leave that place free in time.
    BACKFILL = "BF"
    # Least attained service (Tiresias): discrete queues by attained GPU-time, preempting
    # preemptible work of a higher queue; within a queue, fair share between users;
    # reservations as under BACKFILL bound the wait.
    LAS = "LAS"
    # Fair share between a VC's users by decayed usage, with reservations as BACKFILL.
    FAIR_SHARE = "FS"

    @property
    def reserves(self) -> bool:
        """Whether the first job that cannot start gets a reservation."""
        return self in (Policy.BACKFILL, Policy.LAS, Policy.FAIR_SHARE)

    @property
    def shares_fairly(self) -> bool:
        """Whether users' decayed usage orders the queue (within LAS's queues)."""
        return self in (Policy.LAS, Policy.FAIR_SHARE)


# Least attained service: GPU-seconds at which a job moves to the next queue.
LAS_THRESHOLDS = (16 * 3600.0,)  # one queue boundary, at 16 GPU-hours: the best measured
# Runnable first lets smaller jobs by a waiting one this long, then the waiting job blocks
# its VC as under FIFO. 20 minutes: with an hour, the jobs that went by on an always-full
# queue delayed the largest ones past FIFO's (p95 JCT 1.032x FIFO's on the Philly sample,
# 1.007x on ITP cluster02); with 20 minutes RF's p95 JCT is FIFO's or better on every
# replayed trace (docs/benchmarks.md, 2026-12-04 evening).
RF_STARVATION_SECONDS = 1200.0
# A preempted job waits at least this long before it goes back to the first LAS queue.
LAS_STARVATION_SECONDS = 3600.0
# A preempted job goes back to the first LAS queue after waiting this many times what it
# ran, and at least LAS's starvation guard (Tiresias's STARVE_LIMIT). 0: after the guard
# alone (an hour): with 1.0, long jobs preempted on a congested cluster (cluster02) sat
# behind the first queue for as long as they had run, and came back, as whole gangs, into
# a queue that had since filled up (docs/benchmarks.md, 2026-12-04).
LAS_STARVE_FACTOR = 0.0
# The default (docs/benchmarks.md, 2026-12-03 evening): without preemption it orders as fair
# share on traces with users and as backfill on the ITP traces, the best mean wait or within
# 5 % of it on each; with preemptible jobs it also preempts by attained service.
DEFAULT_POLICY = Policy.LAS


class Placement(StrEnum):
    PACK = "pack"  # best fit: fullest nodes first, whole nodes kept free for big jobs
    SPREAD = "spread"  # worst fit, for comparison in the simulator only


@dataclass(frozen=True, slots=True)
class Resources:
    gpus: int = 0
    millicpus: int = 0
    memory: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus + other.gpus,
            self.millicpus + other.millicpus,
            self.memory + other.memory,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus - other.gpus,
            self.millicpus - other.millicpus,
            self.memory - other.memory,
        )

    def __mul__(self, times: int) -> Resources:
        return Resources(self.gpus * times, self.millicpus * times, self.memory * times)

    def fits_in(self, other: Resources) -> bool:
        return (
            self.gpus <= other.gpus
            and self.millicpus <= other.millicpus
            and self.memory <= other.memory
        )


NO_RESOURCES = Resources()


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's capacity; what jobs hold on it is derived from the running jobs."""

    name: str
    gpu_type: str
    capacity: Resources
    labels: tuple[tuple[str, str], ...] = ()
    schedulable: bool = True  # False when cordoned or out of service for repair
    # The VC a cluster admin bound the node to ("" for none): only jobs whose shape
    # names it in JobShape.pools run there (jobmanager.core.dedication).
    dedicated_to: str = ""
    # The network switch it hangs under ("" for not known): a gang goes under as few
    # switches as it can (jobmanager.core.topology).
    switch: str = ""


@dataclass(frozen=True, slots=True)
class VcState:
    name: str
    quota: dict[str, Resources] = field(default_factory=dict)  # by GPU type
    policy: Policy = Policy.FIFO
    max_interactive_gpus: int | None = None
    # Its dedicated nodes take other VCs' preemptible jobs while it leaves them idle.
    lends_dedicated: bool = False
    # Seconds queued in all before its jobs are overdue (jobmanager.core.overdue); None:
    # the snapshot's las_wait_limit.
    wait_limit: float | None = None


@dataclass(frozen=True, slots=True)
class WorkerPlacement:
    node: str
    gpus: tuple[int, ...]  # device indices on the node
    millicpus: int
    memory: int


@dataclass(frozen=True, slots=True)
class JobShape:
    """What each worker of a job needs, and where it may go."""

    gpu_type: str
    workers: int
    per_worker: Resources
    node_selector: tuple[tuple[str, str], ...] = ()
    # The VCs whose dedicated nodes it may use (its own, and lenders' when preemptible),
    # sorted; nodes dedicated to no VC are open to every job.
    pools: tuple[str, ...] = ()
    # A gang of more than one worker: each worker on a node of its own, taking all of it.
    whole_nodes: bool = False
    # A gang of more than one worker: all its workers under one network switch, or wait.
    same_switch: bool = False
    # Its hash, computed once: a pass looks a shape up in sets and dicts many times a job.
    _hash: int = field(init=False, repr=False, compare=False)
    # Its total, computed once: ranks and victim searches read it millions of times a replay.
    _total: Resources = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self._fields()))
        object.__setattr__(self, "_total", self.per_worker * self.workers)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[JobShape], tuple[object, ...]]:
        # Built again where unpickled: a string's hash differs from process to process.
        return JobShape, self._fields()

    def _fields(self) -> tuple[object, ...]:
        """The fields given to the constructor, in its order."""
        return (
            self.gpu_type,
            self.workers,
            self.per_worker,
            self.node_selector,
            self.pools,
            self.whole_nodes,
            self.same_switch,
        )

    @property
    def total(self) -> Resources:
        return self._total

    @property
    def takes_whole_nodes(self) -> bool:
        return self.whole_nodes and self.workers > 1

    @property
    def needs_one_switch(self) -> bool:
        return self.same_switch and self.workers > 1


@dataclass(frozen=True, slots=True)
class Elastic:
    """An elastic job's range of sizes (jobmanager.core.elastic): it runs with any number of
    workers in [min_workers, max_workers], resized at most once per ``min_interval``
    seconds (a resize restarts it from its last checkpoint)."""

    min_workers: int
    max_workers: int
    min_interval: float = 300.0
    # Its work per second at 1, 2, ... workers, and the work it has left (any unit):
    # with a deadline, the core gives it its minimum satisfactory share first and the
    # other growers the GPUs that shorten them most (jobmanager.core.deadlines).
    throughput: tuple[float, ...] = ()
    work: float | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds resources (running, starting, or releasing them)."""

    id: str
    vc: str
    shape: JobShape
    placement: tuple[WorkerPlacement, ...]
    started_at: float
    priority: int = 0
    preemptible: bool = False  # marked so by its user
    borrowing: bool = False  # started beyond its VC's quota, so preemptible
    interactive: bool = False
    releasing: bool = False  # being stopped (killed, paused or preempted)
    deadline: float | None = None  # when its wall time runs out
    queued_at: float | None = None  # its place in the queue if requeued; else started_at
    user: str = ""
    # When it is expected to end: its wall time, or sooner from its user's history.
    expected_end: float | None = None
    attained: float = 0.0  # GPU-seconds it ran before this start (least attained service)
    checkpoint_interval: float | None = None  # seconds between its checkpoints
    due: float | None = None  # the deadline its user set (QueuedJob.due)
    expected_wait: float | None = None  # QueuedJob.expected_wait
    elastic: Elastic | None = None  # its range of sizes; None: fixed at shape.workers
    resized_at: float | None = None  # its last resize; None: not since it started

    def last_checkpoint(self, now: float) -> float:
        """When it last saved its work (its start, if it never checkpoints): what it ran
        since is lost if it is preempted now."""
        interval = self.checkpoint_interval
        if not interval or now <= self.started_at:
            return self.started_at
        return self.started_at + ((now - self.started_at) // interval) * interval

    def attained_at(self, now: float) -> float:
        return self.attained + self.shape.total.gpus * max(0.0, now - self.started_at)

    @property
    def queue_position(self) -> float:
        return self.queued_at if self.queued_at is not None else self.started_at

    def as_queued(self) -> QueuedJob:
        """The job as it would wait again: at its place in the queue, with its settings."""
        return QueuedJob(
            self.id,
            self.vc,
            self.shape,
            queued_at=self.queue_position,
            priority=self.priority,
            preemptible=self.preemptible,
            interactive=self.interactive,
            user=self.user,
            checkpoint_interval=self.checkpoint_interval,
            due=self.due,
            expected_wait=self.expected_wait,
            elastic=self.elastic,
        )

    @property
    def can_be_preempted(self) -> bool:
        return (self.preemptible or self.borrowing) and not self.releasing


@dataclass(frozen=True, slots=True)
class QueuedJob:
    id: str
    vc: str
    shape: JobShape
    queued_at: float  # the original submission order; kept when a job is preempted
    priority: int = 0
    preemptible: bool = False
    interactive: bool = False
    max_wall_time: float | None = None  # for start-time estimates
    # The place an earlier pass kept for it while the jobs preempted for it let go
    # (Decisions.claims); a pass takes exactly this place when it can.
    reserved: tuple[WorkerPlacement, ...] = ()
    user: str = ""
    # How long it is expected to run (learned from its user's similar jobs, or its wall
    # time); None: unknown, so it is never backfilled ahead of a reservation.
    expected_duration: float | None = None
    attained: float = 0.0  # GPU-seconds it ran before it was preempted
    waiting_since: float | None = None  # when it (last) began to wait; else queued_at
    checkpoint_interval: float | None = None
    due: float | None = None  # its deadline (seconds since the epoch), if its user set one
    # How long it was expected to wait when submitted: the work queued and running ahead
    # of it in its VC, by learned run times, over the VC's GPUs (what FIFO would give it);
    # least attained service's wait bound may scale with it. None: not known.
    expected_wait: float | None = None
    # Its submission burst (jobmanager.core.bursts): same VC, user and size, submitted
    # minutes after the one before; "" when bursts are not followed.
    burst: str = ""
    # Its range of sizes (jobmanager.core.elastic); None: fixed at shape.workers.
    elastic: Elastic | None = None

    @property
    def waiting_from(self) -> float:
        return self.queued_at if self.waiting_since is None else self.waiting_since


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeState, ...]
    vcs: tuple[VcState, ...]
    running: tuple[RunningJob, ...] = ()
    queued: tuple[QueuedJob, ...] = ()
    placement: Placement = Placement.PACK
    # Runnable first lets smaller jobs by a waiting one only this long; after that the
    # waiting job blocks its VC's queue as under FIFO, so that it is not starved forever.
    starvation_seconds: float = RF_STARVATION_SECONDS
    # False: decide starts and preemptions only, with no reasons to wait (Decisions.waits
    # stays empty), as start-time estimates need, at a fraction of the cost.
    explain: bool = True
    # False: nobody borrows idle quota of other VCs (jobs beyond quota wait).
    borrowing: bool = True
    # True: idle GPUs are lent to the VC borrowing least for its quota first; False: in
    # queue order across VCs.
    fair_lending: bool = False
    # Least attained service: the GPU-seconds at which a job moves down a queue.
    las_thresholds: tuple[float, ...] = LAS_THRESHOLDS
    # A job LAS restarted is not preempted again before it has run this long.
    las_quantum: float = 1800.0
    # A preempted job waits at most this many times what it ran (and at least
    # ``las_starvation_seconds``) before it goes back to the first queue (Tiresias's
    # STARVE_LIMIT).
    las_starve_factor: float = LAS_STARVE_FACTOR
    las_starvation_seconds: float = LAS_STARVATION_SECONDS
    # A job that has spent this long queued since its submission, over all its waits,
    # goes before every other and may preempt any job that has not (and has run a
    # quantum); once started it is not preempted by least attained service again. None:
    # no such bound.
    las_wait_limit: float | None = None
    # With a factor, the limit is at least this many times each job's expected wait
    # (QueuedJob.expected_wait): a job waits in all at most about this many times what
    # the queue ahead of it at its submission promised.
    las_wait_factor: float | None = None
    # True: the wait limit binds only jobs that have run before (preempted ones); a job
    # never started keeps its place by attained service and submission.
    las_limit_preempted_only: bool = False
    # True: a job may also preempt jobs of its own LAS queue submitted after it (a queue
    # is served in submission order, preemptively), so that a job moved down a queue
    # gets its GPUs back from the later jobs that reached that queue while it waited.
    las_within_queue: bool = False
    # Fair share: each (VC, user)'s decayed past usage in GPU-seconds.
    usage: dict[tuple[str, str], float] = field(default_factory=dict)
    # Backfill by bursts (jobmanager.core.bursts; None: off): the run time each burst's
    # started jobs have shown so far, and how long a job waits before queue order again.
    burst_service: Mapping[str, float] | None = None
    burst_guard: float = 24 * 3600.0
    # Backfill, largest fit first (an experiment, off by default): among jobs without a
    # deadline, those that can start now go first, the largest of them first.
    largest_fit_first: bool = False


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    placement: tuple[WorkerPlacement, ...]
    borrowing: bool  # beyond the VC's quota: runs as preemptible


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: str
    reason: str
    for_job: str


@dataclass(frozen=True, slots=True)
class Wait:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Resize:
    """A running elastic job's new size: every worker's place, those it keeps included."""

    job_id: str
    placement: tuple[WorkerPlacement, ...]
    workers_from: int
    reason: str

    @property
    def workers_to(self) -> int:
        return len(self.placement)


@dataclass
class Decisions:
    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    # Places kept for waiting jobs until what they wait for is released: to be handed
    # back as QueuedJob.reserved in the next pass, so that it does not plan afresh.
    claims: dict[str, tuple[WorkerPlacement, ...]] = field(default_factory=dict)
    # Backfill reservations: job -> when it is planned to start (its shadow time).
    reservations: dict[str, float] = field(default_factory=dict)
    # Elastic jobs grown or shrunk (jobmanager.core.elastic; the plain pass decides none).
    resizes: list[Resize] = field(default_factory=list)

    def started_ids(self) -> set[str]:
        return {start.job_id for start in self.starts}
