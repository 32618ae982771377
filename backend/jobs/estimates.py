"""Run-time estimates for backfill, learned from the jobs that finished: how long each
user's similar jobs (same VC, same GPUs) really ran (jobmanager.core.estimates)."""

from __future__ import annotations

from backend.jobs.models import Job, JobStatus
from jobmanager.core.estimates import RunTimeEstimator

HISTORY_JOBS = 2000  # the most recent finished jobs read


def learned_run_times() -> RunTimeEstimator:
    estimator = RunTimeEstimator()
    rows = (
        Job.objects.filter(
            status=JobStatus.FINISHED, started_at__isnull=False, finished_at__isnull=False
        )
        .order_by("-finished_at")
        .values_list("vc__name", "owner__username", "workers", "gpus_per_worker",
                     "started_at", "finished_at")[:HISTORY_JOBS]
    )  # fmt: skip
    for vc, user, workers, gpus_per_worker, started, finished in reversed(rows):
        seconds = (finished - started).total_seconds()
        estimator.observe(vc, user, workers * gpus_per_worker, max(seconds, 0.0))
    return estimator
