"""The figures one run is judged by."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from jobmanager.simulate.engine import Replay

LONG_WAIT_SECONDS = 15 * 60
# Slowdown is JCT over run time, with run times below this counted as this long (the
# usual "bounded slowdown": a 1 s job that waited a minute is not 60 times worse off
# than a 10 s one that waited as long, and ten-second jobs make no user's mean).
SLOWDOWN_FLOOR_SECONDS = 10.0


@dataclass(frozen=True)
class RunMetrics:
    """Times in seconds. JCT (job completion time) is end - submission; queueing delay is
    first start - submission; time queued is every wait of a job, those after its
    preemptions too (JCT less the time it held GPUs). Utilisation is busy GPU-seconds over
    the cluster's GPU-seconds, over two spans: the submission window (first to last
    submission: what ``--target-load`` sizes the cluster by) and the makespan (first
    submission to last end, which includes the drain of the queue after the last
    submission). Fairness between users, where the trace names them: Jain's index
    (1 = every user alike, 1/n = one user takes all) of each user's mean slowdown and of
    each user's mean time queued (every wait); NaN for a trace without users."""

    policy: str
    placement: str
    jobs: int
    completed: int
    avg_jct: float
    p95_jct: float
    avg_queue_delay: float
    p95_queue_delay: float
    max_queue_delay: float
    avg_time_queued: float
    max_time_queued: float
    queued_over_15min: int
    preemptions: int
    utilisation_submission_window: float
    utilisation_makespan: float
    makespan: float
    lost_gpu_hours: float
    deadlines: int  # jobs that had one
    deadlines_met: float  # share of those that ended by it (NaN: none had one)
    unplaceable: int
    users: int  # distinct users among the completed jobs (0: the trace names none)
    jain_slowdown: float  # Jain's index of per-user mean (bounded) slowdown
    jain_time_queued: float  # Jain's index of per-user mean time queued
    passes: int
    wall_seconds: float
    gang_starts: int = 0  # starts of gangs on more than one node
    straddled_starts: int = 0  # of those, under more than one network switch

    @property
    def label(self) -> str:
        return f"{self.policy}+{self.placement}"

    def as_row(self) -> dict[str, object]:
        return asdict(self)


def measure(run: Replay) -> RunMetrics:
    ended_at = {index: ended for index, ended in enumerate(run.ended) if ended is not None}
    completed = list(ended_at)
    jcts = [ended_at[index] - run.submitted[index] for index in completed]
    delays = queue_delays(run)
    queued = times_queued(run)
    first_submit = min(run.submitted, default=0.0)
    last_end = max(ended_at.values(), default=first_submit)
    makespan = last_end - first_submit
    capacity = run.cluster.gpus * makespan
    window = run.cluster.gpus * (max(run.submitted, default=0.0) - first_submit)
    by_user = _per_user_slowdowns_and_waits(run)
    with_deadline = [index for index, due in enumerate(run.deadlines) if due is not None]
    met = [
        index
        for index in with_deadline
        if run.ended[index] is not None and run.ended[index] <= run.deadlines[index]  # type: ignore[operator]
    ]
    return RunMetrics(
        policy=run.policy.value,
        placement=run.placement.value,
        jobs=len(run.job_ids) + len(run.unplaceable),
        completed=len(completed),
        avg_jct=_mean(jcts),
        p95_jct=percentile(jcts, 95),
        avg_queue_delay=_mean(delays),
        p95_queue_delay=percentile(delays, 95),
        max_queue_delay=max(delays, default=math.nan),
        avg_time_queued=_mean(queued),
        max_time_queued=max(queued, default=math.nan),
        queued_over_15min=sum(1 for delay in delays if delay > LONG_WAIT_SECONDS),
        preemptions=run.preemptions,
        utilisation_submission_window=run.busy_in_window / window if window > 0 else 0.0,
        utilisation_makespan=run.busy_gpu_seconds / capacity if capacity > 0 else 0.0,
        makespan=makespan,
        lost_gpu_hours=run.lost_gpu_seconds / 3600,
        deadlines=len(with_deadline),
        deadlines_met=len(met) / len(with_deadline) if with_deadline else math.nan,
        unplaceable=len(run.unplaceable),
        users=len(by_user),
        jain_slowdown=jain_index([_mean(values) for values, _ in by_user.values()]),
        jain_time_queued=jain_index([_mean(values) for _, values in by_user.values()]),
        passes=run.passes,
        wall_seconds=run.wall_seconds,
        gang_starts=run.gang_starts,
        straddled_starts=run.straddled_starts,
    )


def queue_delays(run: Replay) -> list[float]:
    """Each started job's wait from submission to its first start."""
    return [
        started - submitted
        for started, submitted in zip(run.first_start, run.submitted, strict=True)
        if started is not None
    ]


def times_queued(run: Replay) -> list[float]:
    """Each completed job's time in the queue, over all its waits: its JCT less the time
    it held GPUs (equal to its queueing delay if it was never preempted)."""
    return [
        ended - submitted - held
        for ended, submitted, held in zip(run.ended, run.submitted, run.held, strict=True)
        if ended is not None
    ]


def slowdown(jct: float, duration: float) -> float:
    """JCT over run time, the run time counted as at least SLOWDOWN_FLOOR_SECONDS; >= 1."""
    return max(1.0, jct / max(duration, SLOWDOWN_FLOOR_SECONDS))


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when every value is the same, 1/n
    when one value holds all; 1 for values that are all 0 (all alike), NaN for none."""
    if not values:
        return math.nan
    squares = sum(value * value for value in values)
    if squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def _per_user_slowdowns_and_waits(run: Replay) -> dict[str, tuple[list[float], list[float]]]:
    """Each named user's completed jobs' slowdowns and times queued."""
    by_user: dict[str, tuple[list[float], list[float]]] = {}
    for index, user in enumerate(run.users):
        ended = run.ended[index]
        if not user or ended is None:
            continue
        jct = ended - run.submitted[index]
        slowdowns, waits = by_user.setdefault(user, ([], []))
        slowdowns.append(slowdown(jct, run.durations[index]))
        waits.append(jct - run.held[index])
    return by_user


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


JOB_COLUMNS = (
    "job_id", "submitted", "first_start", "ended", "wait", "queued", "jct", "gpus",
    "duration", "preemptions", "deadline", "deadline_met",
)  # fmt: skip


def job_rows(run: Replay) -> list[dict[str, object]]:
    """One row per job: submit, first start, end, wait, preemptions, deadline met."""
    rows = []
    for index, job_id in enumerate(run.job_ids):
        start, end, due = run.first_start[index], run.ended[index], run.deadlines[index]
        submitted = run.submitted[index]
        rows.append(
            {
                "job_id": job_id,
                "submitted": submitted,
                "first_start": start,
                "ended": end,
                "wait": None if start is None else start - submitted,
                "queued": None if end is None else end - submitted - run.held[index],
                "jct": None if end is None else end - submitted,
                "gpus": run.gpus[index],
                "duration": run.durations[index],
                "preemptions": max(run.starts[index] - 1, 0),
                "deadline": due,
                "deadline_met": None if due is None else end is not None and end <= due,
            }
        )
    return rows
