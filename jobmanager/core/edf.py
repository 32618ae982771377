"""Deadlines: earliest deadline first among the jobs that can still make theirs."""

from __future__ import annotations

from typing import Any

from jobmanager.core.queues import queue_order
from jobmanager.core.snapshot import QueuedJob


def deadline_rank(job: QueuedJob, now: float) -> tuple[Any, ...]:
    """A job's place in a backfill VC's queue: the jobs with a deadline they can still
    make (by their expected run time), earliest deadline first; the others (none set, or
    out of reach) in queue order after them, so that EDF reorders only where it keeps a
    deadline met."""
    due = job.due
    if due is not None and now + (job.expected_duration or 0.0) <= due:
        return (0, due)
    return (1, *queue_order(job))
