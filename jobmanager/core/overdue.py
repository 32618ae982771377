"""The wait limit: a job queued that long in all is *overdue* and goes first.

Time queued counts every wait since submission, those after preemptions included (what the
job did not spend holding its GPUs). Least attained service and fair share rank an overdue
job before every other of its VC (Tiresias's promotion), so no job waits much more than
the limit in all; an overdue job preempts nothing, and least attained service no longer
preempts a job that was overdue when it started (jobmanager.core.las).
"""

from __future__ import annotations

import math

from jobmanager.core.snapshot import QueuedJob, RunningJob, Snapshot, VcState

# The rank of an overdue job: before the first LAS queue and before any user's usage.
OVERDUE = -1


def time_queued(job: QueuedJob, now: float) -> float:
    """Seconds the job has waited since its submission, over all its waits: what it did
    not spend holding its GPUs (its attained GPU-seconds over its GPUs)."""
    return now - job.queued_at - job.attained / max(job.shape.total.gpus, 1)


def wait_limit(
    snapshot: Snapshot, expected_wait: float | None, vc: VcState | None = None
) -> float | None:
    """How long a job may wait in all before it is overdue: its VC's wait limit (else the
    snapshot's), or the wait factor times its expected wait if that is longer; None: no
    bound."""
    limit = snapshot.las_wait_limit if vc is None or vc.wait_limit is None else vc.wait_limit
    factor = snapshot.las_wait_factor
    if factor is not None and expected_wait is not None:
        scaled = factor * expected_wait
        limit = scaled if limit is None else max(limit, scaled)
    return limit


def is_overdue(snapshot: Snapshot, job: QueuedJob, vc: VcState | None = None) -> bool:
    """Whether the job (of ``vc``) has waited past its wait limit, all its waits together."""
    if snapshot.las_limit_preempted_only and job.attained <= 0:
        return False
    limit = wait_limit(snapshot, job.expected_wait, vc)
    return limit is not None and time_queued(job, snapshot.now) >= limit


def overdue_from(snapshot: Snapshot, job: QueuedJob, vc: VcState | None = None) -> float | None:
    """The earliest clock reading at which ``is_overdue`` holds for the queued job (inf:
    never), so that a caller asks once a job rather than once a pass. Exact: time queued
    is computed as ``is_overdue`` does and grows with the clock (each rounded subtraction
    is monotone), so the threshold is found by stepping from the sum to the first float
    at which that computation reaches the limit. None: not found in a few steps (ask
    ``is_overdue`` each time)."""
    if snapshot.las_limit_preempted_only and job.attained <= 0:
        return math.inf
    limit = wait_limit(snapshot, job.expected_wait, vc)
    if limit is None:
        return math.inf
    gpus = max(job.shape.total.gpus, 1)
    queued_at, attained = job.queued_at, job.attained

    def late(now: float) -> bool:
        return now - queued_at - attained / gpus >= limit

    at = queued_at + attained / gpus + limit
    if not math.isfinite(at):
        return None
    for _ in range(64):
        if not late(at):
            break
        at = math.nextafter(at, -math.inf)
    else:
        return None
    for _ in range(64):
        at = math.nextafter(at, math.inf)
        if late(at):
            return at
    return None


def was_overdue(snapshot: Snapshot, running: RunningJob, vc: VcState | None = None) -> bool:
    """Whether the running job (of ``vc``) was overdue when it (last) started: then least
    attained service does not preempt it."""
    limit = wait_limit(snapshot, running.expected_wait, vc)
    if limit is None or (snapshot.las_limit_preempted_only and running.attained <= 0):
        return False
    held = running.attained / max(running.shape.total.gpus, 1)
    return running.started_at - running.queue_position - held >= limit
