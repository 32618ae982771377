"""A job request: one submission, validated, with every default filled in.

The one shape a submission takes from the REST serializer (whose body ``trainyard
submit`` and its manifests send) down to ``Job.from_request``, which builds the unsaved
job. The defaulting and sizing policy (how many workers, how much CPU and memory a worker
gets, its wall time, its name) is ``job_request_of``, here; the rules a request must pass
are in ``backend.jobs.submission``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol, TypedDict

from backend.clusters.models import CPU_ONLY_GPU_TYPE, GpuType
from backend.jobs.models import JobType, RetryOn
from backend.vcs.models import VirtualCluster

# Directional formatting (embeddings, overrides, isolates, marks): text shown in another
# order than it is stored, as in "Trojan Source" (check_name refuses it in a name).
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


class ExposedPort(TypedDict):
    """A port of worker 0 reached in a browser through /endpoints/<job>/<name>/."""

    name: str
    port: int


class RequestedResources(Protocol):
    """What the resource rules read of a job, asked for or stored: a ``JobRequest`` and a
    ``Job`` both have it."""

    @property
    def vc(self) -> VirtualCluster: ...
    @property
    def gpu_type(self) -> GpuType: ...
    @property
    def type(self) -> str: ...
    @property
    def workers(self) -> int: ...
    @property
    def gpus_per_worker(self) -> int: ...
    @property
    def cpus_per_worker(self) -> Decimal: ...
    @property
    def memory_per_worker(self) -> int: ...
    @property
    def preemptible(self) -> bool: ...
    @property
    def max_wall_time(self) -> int: ...


@dataclass(frozen=True)
class JobRequest:
    """A validated submission with every default filled in (``RequestedResources``)."""

    vc: VirtualCluster
    gpu_type: GpuType
    name: str
    type: str
    command: str
    workers: int
    min_workers: int  # equal to workers and max_workers for a job of fixed size
    max_workers: int
    gpus_per_worker: int
    cpus_per_worker: Decimal
    memory_per_worker: int
    max_retries: int
    max_wall_time: int
    retry_on: str = RetryOn.INFRASTRUCTURE
    image: str = ""
    working_dir: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    data_path: str = ""
    output_path: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    whole_nodes: bool = False
    same_switch: bool = False
    ports: tuple[ExposedPort, ...] = ()
    preemptible: bool = False
    priority: int = 0
    deadline: datetime | None = None
    # Deadlines that scale (backend/jobs/admission.py): work per second at 1, 2, ...
    # workers, the work it needs, and the admission answer it got.
    throughput: tuple[float, ...] = ()
    work: float | None = None
    admission: str = ""
    admission_share: int | None = None
    earliest_finish: datetime | None = None


def worker_range(submitted: Mapping[str, Any]) -> tuple[int, int, int]:
    """Workers, min_workers and max_workers with their defaults: the range defaults to
    workers at both ends, and workers to max_workers (else 1)."""
    workers = submitted.get("workers") or submitted.get("max_workers") or 1
    return workers, submitted.get("min_workers", workers), submitted.get("max_workers", workers)


def default_wall_time(vc: VirtualCluster, job_type: str) -> int:
    """A job's wall time when it gives none: the VC's maximum, or for an interactive job
    (a shell, a notebook, which nobody ends) the VC's interactive default, 8 h unless set."""
    if job_type == JobType.INTERACTIVE:
        return min(vc.interactive_wall_time, vc.max_wall_time)
    return vc.max_wall_time


def default_name(command: str) -> str:
    """The command's program, without what check_name refuses."""
    first_word = command.split()[0] if command.split() else "job"
    name = first_word.rsplit("/", 1)[-1][:200]
    kept = "".join(char for char in name if char.isprintable() and char not in BIDI_CONTROLS)
    return kept or "job"


def gpus_per_worker(asked: int | None, gpu_type_name: str | None) -> tuple[int, list[str]]:
    """GPUs per worker with the default filled in (1; none on CPU-only nodes), and what
    is wrong with the count asked for: a wrong count gives the nearest valid one, so that
    the other rules still run."""
    if gpu_type_name == CPU_ONLY_GPU_TYPE:
        return 0, ["CPU-only nodes have no GPUs; ask for 0."] if asked else []
    if asked == 0:
        return 1, [f"Ask for at least 1 GPU, or use gpu_type {CPU_ONLY_GPU_TYPE!r}."]
    return asked or 1, []


def worker_size(
    gpu_type: GpuType, gpus: int, cpus: Decimal | None, memory: int | None
) -> tuple[Decimal, int]:
    """A worker's CPUs and memory (MiB): those asked for, else the GPU type's t-shirt size
    per GPU (a CPU-only worker gets one size)."""
    units = max(gpus, 1)
    return (
        cpus if cpus is not None else gpu_type.cpus_per_gpu * units,
        memory if memory is not None else gpu_type.memory_per_gpu * units,
    )


def job_request_of(submitted: Mapping[str, Any], gpu_type: GpuType, gpus: int) -> JobRequest:
    """The request a submission's checked fields make (the serializer's validated fields,
    ``vc`` a VirtualCluster), on ``gpu_type`` with ``gpus`` per worker, every field left out
    given its default."""
    vc: VirtualCluster = submitted["vc"]
    workers, min_workers, max_workers = worker_range(submitted)
    cpus, memory = worker_size(
        gpu_type, gpus, submitted.get("cpus_per_worker"), submitted.get("memory_per_worker")
    )
    job_type = submitted.get("type", JobType.BATCH)
    return JobRequest(
        vc=vc,
        gpu_type=gpu_type,
        name=submitted.get("name") or default_name(submitted["command"]),
        type=job_type,
        command=submitted["command"],
        image=submitted.get("image", ""),
        workers=workers,
        min_workers=min_workers,
        max_workers=max_workers,
        gpus_per_worker=gpus,
        cpus_per_worker=cpus,
        memory_per_worker=memory,
        env=submitted.get("env") or {},
        working_dir=submitted.get("working_dir", ""),
        data_path=submitted.get("data_path", ""),
        output_path=submitted.get("output_path", ""),
        node_selector=submitted.get("node_selector") or {},
        whole_nodes=submitted.get("whole_nodes", False),
        same_switch=submitted.get("same_switch", False),
        ports=tuple(submitted.get("ports") or ()),
        preemptible=submitted.get("preemptible", False),
        priority=submitted.get("priority", 0),
        max_retries=submitted.get("max_retries", vc.default_max_retries),
        retry_on=submitted.get("retry_on", RetryOn.INFRASTRUCTURE),
        max_wall_time=submitted.get("max_wall_time", default_wall_time(vc, job_type)),
        deadline=submitted.get("deadline"),
        throughput=tuple(submitted.get("throughput") or ()),
        work=submitted.get("work"),
    )
