"""What the scheduler sees (a snapshot) and what it decides, as frozen dataclasses.

CPU is counted in millicores and memory in MiB, so that every sum is an exact integer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Policy(StrEnum):
    FIFO = "FIFO"  # the head of a VC's queue blocks the jobs behind it
    RF = "RF"  # runnable first: a job that cannot start lets smaller ones by


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


@dataclass(frozen=True, slots=True)
class VcState:
    name: str
    quota: dict[str, Resources] = field(default_factory=dict)  # by GPU type
    policy: Policy = Policy.FIFO
    max_interactive_gpus: int | None = None


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

    @property
    def total(self) -> Resources:
        return self.per_worker * self.workers


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
    starvation_seconds: float = 3600.0
    # False: decide starts and preemptions only, with no reasons to wait (Decisions.waits
    # stays empty), as start-time estimates need, at a fraction of the cost.
    explain: bool = True


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


@dataclass
class Decisions:
    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    # Places kept for waiting jobs until what they wait for is released: to be handed
    # back as QueuedJob.reserved in the next pass, so that it does not plan afresh.
    claims: dict[str, tuple[WorkerPlacement, ...]] = field(default_factory=dict)

    def started_ids(self) -> set[str]:
        return {start.job_id for start in self.starts}
