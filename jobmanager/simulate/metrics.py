"""The figures one run is judged by."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from jobmanager.simulate.engine import Replay

LONG_WAIT_SECONDS = 15 * 60


@dataclass(frozen=True)
class RunMetrics:
    """Times in seconds. JCT (job completion time) is end - submission; queueing delay is
    first start - submission; utilisation is busy GPU-seconds over the cluster's GPU-seconds
    from the first submission to the last end (the makespan)."""

    policy: str
    placement: str
    jobs: int
    completed: int
    avg_jct: float
    p95_jct: float
    avg_queue_delay: float
    p95_queue_delay: float
    queued_over_15min: int
    preemptions: int
    gpu_utilisation: float
    makespan: float
    unplaceable: int
    passes: int
    wall_seconds: float

    @property
    def label(self) -> str:
        return f"{self.policy}+{self.placement}"

    def as_row(self) -> dict[str, object]:
        return asdict(self)


def measure(run: Replay) -> RunMetrics:
    completed = [index for index, ended in enumerate(run.ended) if ended is not None]
    jcts = [run.ended[index] - run.submitted[index] for index in completed]  # type: ignore[operator]
    delays = queue_delays(run)
    first_submit = min(run.submitted, default=0.0)
    last_end = max((run.ended[index] for index in completed), default=first_submit)
    makespan = last_end - first_submit  # type: ignore[operator]
    capacity = run.cluster.gpus * makespan
    return RunMetrics(
        policy=run.policy.value,
        placement=run.placement.value,
        jobs=len(run.job_ids) + len(run.unplaceable),
        completed=len(completed),
        avg_jct=_mean(jcts),
        p95_jct=percentile(jcts, 95),
        avg_queue_delay=_mean(delays),
        p95_queue_delay=percentile(delays, 95),
        queued_over_15min=sum(1 for delay in delays if delay > LONG_WAIT_SECONDS),
        preemptions=run.preemptions,
        gpu_utilisation=run.busy_gpu_seconds / capacity if capacity > 0 else 0.0,
        makespan=makespan,
        unplaceable=len(run.unplaceable),
        passes=run.passes,
        wall_seconds=run.wall_seconds,
    )


def queue_delays(run: Replay) -> list[float]:
    """Each started job's wait from submission to its first start."""
    return [
        started - submitted
        for started, submitted in zip(run.first_start, run.submitted, strict=True)
        if started is not None
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, interpolated between the closest ranks (as numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
