"""Backfill by bursts (an experiment, off by default): shortest shown service first.

Users submit sweeps: jobs of the same VC, user and size minutes apart, whose run times
are alike (on the ITP traces the log run times of consecutive ones correlate 0.72-0.96).
A scheduler does not know a waiting job's run time, but it sees how long its burst's
started jobs have run (ended ones: their run time; running ones: so far). Ranking bursts
by that shown service (least first, as least attained service ranks jobs, but without
preempting anything) lets a sweep of short jobs by a sweep of long ones once one of its
jobs has shown it short; a burst none of whose jobs has started ranks first, so each
burst gets a probe. A job that has waited ``burst_guard`` goes back to queue order ahead
of them all (its reservation then bounds its wait).
"""

from __future__ import annotations

from typing import Any

from jobmanager.core.snapshot import QueuedJob, Snapshot


def burst_rank(job: QueuedJob, snapshot: Snapshot) -> tuple[Any, ...]:
    """A job's place in a backfill VC's queue by its burst's shown service."""
    if snapshot.now - job.waiting_from >= snapshot.burst_guard:
        return (1, -1.0)
    service = snapshot.burst_service or {}
    return (1, service.get(job.burst, 0.0))
