"""The one small interface between the job manager and wherever jobs run.

A backend deploys a placed job (all of its workers, or nothing), reports the state and
exit code of every worker it knows, stops jobs, and lists its nodes. Every call is
idempotent: the job manager may repeat any of them after a crash.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum


class WorkerState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    rank: int
    node: str
    gpus: tuple[int, ...]
    millicpus: int
    memory: int  # MiB


@dataclass(frozen=True, slots=True)
class RunAs:
    """The Unix account every process of a job runs under: its owner's."""

    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups, as initgroups(3) would set them
    name: str
    home: str = ""

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid}, gid {self.gid})"


@dataclass(frozen=True, slots=True)
class Isolation:
    """How a backend runs a job's processes, as the job page shows it."""

    run_as: str  # whose account, e.g. "ty-bob (uid 30001, gid 30001)"
    limits: str  # which CPU and memory limits are in force, and how


@dataclass(frozen=True, slots=True)
class JobLaunch:
    """Everything a backend needs to run one attempt of a job."""

    job_id: str
    attempt: int
    name: str
    owner: str
    vc: str
    command: str
    workers: tuple[WorkerSpec, ...]
    image: str = ""
    working_dir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    data_path: str = ""
    output_path: str = ""
    job_type: str = "batch"
    run_as: RunAs | None = None  # None: the owner has no account (refused where it matters)
    # Seconds this attempt may run: what is left of the job's wall time (None: no limit).
    # The job manager stops the job then; a backend whose engine can also end it when the
    # portal is down passes it on (Slurm's --time).
    wall_time: float | None = None
    # An elastic job's range of sizes (0, 0: fixed at len(workers)); a backend that
    # resizes runs each worker under torchrun's elastic agent (backends/elastic.py).
    min_workers: int = 0
    max_workers: int = 0

    @property
    def elastic(self) -> bool:
        return 0 < self.min_workers < self.max_workers


# A WorkerReport.reason starting with this: the worker's node went bad (NotReady, a failed
# health condition, taken out of service). The attempt cannot go on; requeue it at once.
NODE_UNHEALTHY = "NodeUnhealthy"
# A WorkerReport.reason of a worker the backend ended because it was asked to stop (its
# peers failed, or the job was killed): its end explains nothing.
STOPPED = "Stopped"


@dataclass(frozen=True, slots=True)
class WorkerReport:
    rank: int
    state: WorkerState
    exit_code: int | None = None
    reason: str = ""  # why a worker is pending or failed, when the backend can tell


@dataclass(frozen=True, slots=True)
class JobReport:
    """What the backend knows of one deployed attempt."""

    job_id: str
    attempt: int
    workers: tuple[WorkerReport, ...]

    @property
    def ended(self) -> bool:
        return all(w.state in (WorkerState.SUCCEEDED, WorkerState.FAILED) for w in self.workers)

    @property
    def started(self) -> bool:
        """Whether every worker has started (none is still pending)."""
        return all(w.state != WorkerState.PENDING for w in self.workers)

    @property
    def succeeded(self) -> bool:
        return bool(self.workers) and all(w.state == WorkerState.SUCCEEDED for w in self.workers)

    @property
    def failed_worker(self) -> WorkerReport | None:
        """The worker whose exit code, reason and log explain the attempt: the first that
        failed by itself, else the first one stopped."""
        failed = [w for w in self.workers if w.state == WorkerState.FAILED]
        return next((w for w in failed if w.reason != STOPPED), failed[0] if failed else None)


@dataclass(frozen=True, slots=True)
class BackendNode:
    name: str
    gpu_type: str
    gpus: int
    millicpus: int
    memory: int
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    declared: bool = False  # GPUs declared by configuration, not discovered on hardware
    # Its place in the network, where the backend knows it ("": not known).
    switch: str = ""
    rack: str = ""


class DeployError(RuntimeError):
    """The backend could not start every worker; whatever it had created is removed."""


class LaunchRefused(DeployError):
    """The launch itself cannot run here (its owner has no account, a path it names is
    not the owner's): the same launch would fail again."""


class ClusterBackend(abc.ABC):
    name: str = "abstract"
    # Whether it grows and shrinks running elastic jobs (``resize``); where not, elastic
    # jobs run at the size they were submitted with.
    resizes: bool = False

    @abc.abstractmethod
    def deploy(self, launch: JobLaunch) -> None:
        """Start every worker of the attempt, or none (raise DeployError after cleaning
        up). Deploying an attempt that is already deployed changes nothing."""

    def resize(self, launch: JobLaunch, grace_seconds: float) -> None:
        """Bring a deployed attempt to the launch's workers: start those of ranks it does
        not run yet, stop those of ranks beyond the launch's (SIGTERM, a kill after the
        grace period) and forget them; the workers it keeps go on. Idempotent."""
        raise NotImplementedError(f"the {self.name} backend does not resize jobs")

    @abc.abstractmethod
    def stop(self, job_id: str, grace_seconds: float) -> None:
        """Ask every worker of the job to stop (SIGTERM, then a kill after the grace
        period). Returns at once; ``reports`` shows when they are gone."""

    @abc.abstractmethod
    def reports(self) -> dict[str, JobReport]:
        """Every job the backend holds, by job id, including ended ones not yet removed."""

    @abc.abstractmethod
    def remove(self, job_id: str) -> None:
        """Forget an ended (or stopped) job and free whatever it held."""

    @abc.abstractmethod
    def nodes(self) -> list[BackendNode]:
        """The nodes jobs can run on, with capacity, readiness and labels."""

    @contextlib.contextmanager
    def nodes_pinned(self) -> Iterator[None]:
        """Within it, ``nodes`` may answer as it did on entry: one look at the inventory
        for a batch of deployments rather than one for each (by default, no change)."""
        yield

    def isolation(self, launch: JobLaunch) -> Isolation:
        """As whom and under which limits the launch runs (or would run) here."""
        return Isolation(run_as="", limits="")

    def default_working_dir(self, job_id: str) -> str:
        """The directory the job's command runs in when its spec names none ("" where the
        backend cannot tell, as for an image's own)."""
        return ""

    def bad_nodes(self) -> dict[str, str]:
        """Nodes that are up but must not run jobs (failed health conditions), with why."""
        return {}

    def cordon(self, node: str, cordoned: bool) -> None:  # noqa: B027 - optional
        """Keep new work off a node (or let it back); backends without the notion ignore it."""
