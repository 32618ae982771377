"""Small builders for pure scheduling-core tests: nodes, VCs, jobs and snapshots in a line."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    Decisions,
    JobShape,
    NodeState,
    Placement,
    Policy,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    VcState,
    WorkerPlacement,
)

GIB = 1024
PLENTY = 10**9  # quota CPU and memory that never bind


def node(
    name: str,
    gpus: int = 4,
    gpu_type: str = "A100",
    cpus: int = 64,
    memory: int = 512 * GIB,
    labels: dict[str, str] | None = None,
    schedulable: bool = True,
) -> NodeState:
    return NodeState(
        name=name,
        gpu_type=gpu_type,
        capacity=Resources(gpus, cpus * 1000, memory),
        labels=tuple(sorted((labels or {}).items())),
        schedulable=schedulable,
    )


def nodes(count: int, gpus: int = 4, prefix: str = "n", **kwargs) -> tuple[NodeState, ...]:
    return tuple(node(f"{prefix}{index:02d}", gpus, **kwargs) for index in range(count))


def vc(
    name: str,
    gpus: int = 0,
    policy: Policy = Policy.FIFO,
    gpu_type: str = "A100",
    max_interactive_gpus: int | None = None,
) -> VcState:
    """A VC whose quota binds on GPUs only (CPU and memory quotas are plentiful)."""
    return VcState(
        name=name,
        quota={gpu_type: Resources(gpus, PLENTY, PLENTY)},
        policy=policy,
        max_interactive_gpus=max_interactive_gpus,
    )


def shape(
    gpus: int = 1,
    workers: int = 1,
    gpu_type: str = "A100",
    cpus: int = 1,
    memory: int = GIB,
    selector: dict[str, str] | None = None,
) -> JobShape:
    return JobShape(
        gpu_type=gpu_type,
        workers=workers,
        per_worker=Resources(gpus, cpus * 1000, memory),
        node_selector=tuple(sorted((selector or {}).items())),
    )


def queued(
    job_id: str,
    vc: str = "a",
    *,
    gpus: int = 1,
    workers: int = 1,
    at: float = 0.0,
    gpu_type: str = "A100",
    cpus: int = 1,
    memory: int = GIB,
    selector: dict[str, str] | None = None,
    **fields,
) -> QueuedJob:
    job_shape = shape(gpus, workers, gpu_type, cpus, memory, selector)
    return QueuedJob(job_id, vc, job_shape, queued_at=at, **fields)


def running(
    job_id: str,
    vc: str,
    *workers: tuple[str, tuple[int, ...]],
    started_at: float = 0.0,
    gpu_type: str = "A100",
    cpus: int = 1,
    **fields,
) -> RunningJob:
    """A running job with one worker per ``(node, GPU indices)``, all of the same size."""
    gpus = len(workers[0][1])
    placement = tuple(
        WorkerPlacement(node_name, tuple(indices), cpus * 1000, GIB)
        for node_name, indices in workers
    )
    job_shape = shape(gpus, len(workers), gpu_type, cpus)
    return RunningJob(job_id, vc, job_shape, placement, started_at=started_at, **fields)


def snapshot(
    cluster: tuple[NodeState, ...],
    vcs: tuple[VcState, ...] | list[VcState],
    running_jobs: tuple[RunningJob, ...] | list[RunningJob] = (),
    queued_jobs: tuple[QueuedJob, ...] | list[QueuedJob] = (),
    now: float = 100.0,
    placement: Placement = Placement.PACK,
    starvation_seconds: float = 3600.0,
) -> Snapshot:
    return Snapshot(
        now=now,
        nodes=tuple(cluster),
        vcs=tuple(vcs),
        running=tuple(running_jobs),
        queued=tuple(queued_jobs),
        placement=placement,
        starvation_seconds=starvation_seconds,
    )


def advance(
    before: Snapshot,
    decisions: Decisions,
    now: float | None = None,
    gone: set[str] | frozenset[str] = frozenset(),
) -> Snapshot:
    """The next pass's snapshot as the live system would load it: started jobs run,
    preempted ones are still releasing their resources (or ``gone``, once stopped), kept
    places are handed back."""
    now = before.now + 1 if now is None else now
    by_id = {job.id: job for job in before.queued}
    victims = {preemption.job_id for preemption in decisions.preemptions}
    still_running = [
        replace(job, releasing=True) if job.id in victims else job
        for job in before.running
        if job.id not in gone
    ]
    for start in decisions.starts:
        job = by_id.pop(start.job_id)
        still_running.append(
            RunningJob(
                job.id,
                job.vc,
                job.shape,
                start.placement,
                started_at=before.now,
                priority=job.priority,
                preemptible=job.preemptible,
                borrowing=start.borrowing,
                interactive=job.interactive,
                queued_at=job.queued_at,
            )
        )
    waiting = tuple(
        replace(job, reserved=decisions.claims.get(job.id, ())) for job in by_id.values()
    )
    return replace(before, now=now, running=tuple(still_running), queued=waiting)


def without(before: Snapshot, *job_ids: str) -> Snapshot:
    """The snapshot once these running jobs have gone."""
    gone = set(job_ids)
    return replace(before, running=tuple(job for job in before.running if job.id not in gone))


def started(decisions: Decisions) -> list[str]:
    return [start.job_id for start in decisions.starts]


def reasons(decisions: Decisions) -> dict[str, str]:
    return {wait.job_id: wait.reason for wait in decisions.waits}


def preempted(decisions: Decisions) -> set[str]:
    return {preemption.job_id for preemption in decisions.preemptions}


def gpus_by_node(decisions: Decisions, job_id: str) -> Counter[str]:
    start = next(start for start in decisions.starts if start.job_id == job_id)
    counts: Counter[str] = Counter()
    for worker in start.placement:
        counts[worker.node] += len(worker.gpus)
    return counts


def decide(*args, **kwargs) -> Decisions:
    return schedule(snapshot(*args, **kwargs))
