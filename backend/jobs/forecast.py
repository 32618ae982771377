"""Forecasts for waiting and running jobs, from one forward simulation of the queue
(jobmanager.core.timeline): when each waiting job is likely to start, and whether each
job with a deadline is predicted to finish by it; and how many deadlines were met."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from backend.core.deadlocks import atomic_retrying_deadlocks
from backend.jobs.models import ACTIVE_STATUSES, TERMINAL_STATUSES, Job, JobStatus
from backend.jobs.snapshot import load_snapshot
from backend.vcs.models import VirtualCluster
from jobmanager.core.snapshot import Snapshot
from jobmanager.core.timeline import estimate_start_times, forecast_deadlines


@dataclass(frozen=True)
class Forecast:
    """What one forward simulation predicts: estimated starts of waiting jobs (seconds
    since the epoch) and, for jobs with a deadline, whether they make it."""

    starts: dict[str, float]
    deadlines: dict[str, bool | None]

    def start_of(self, job_id: str) -> datetime | None:
        start = self.starts.get(job_id)
        if start is None:
            return None
        return datetime.fromtimestamp(start, tz=UTC).replace(microsecond=0)


def forecast(snapshot: Snapshot | None = None) -> Forecast:
    """Run the queue forward from now (running jobs end at their wall-time limits)."""
    snapshot = snapshot or load_snapshot()
    starts = estimate_start_times(
        snapshot, default_run_time=settings.TRAINYARD_DEFAULT_MAX_WALL_TIME
    )
    return Forecast(starts, forecast_deadlines(snapshot, starts))


def refresh_forecasts() -> int:
    """Write each waiting job's estimated start and each deadline's forecast where they
    changed; returns how many jobs changed."""
    predicted = forecast()
    rows = Job.objects.filter(status__in=(JobStatus.QUEUED, *ACTIVE_STATUSES)).values_list(
        "job_id", "status", "estimated_start_at", "deadline_forecast"
    )
    changed = 0
    for job_id, status, estimate, was in rows:
        update: dict[str, object] = {}
        if status == JobStatus.QUEUED:
            start = predicted.start_of(job_id)
            if start != estimate:
                update["estimated_start_at"] = start
        met = predicted.deadlines.get(job_id)
        if met != was:
            update["deadline_forecast"] = met
        if update:
            Job.objects.filter(job_id=job_id, status=status).update(**update)
            changed += 1
    return changed


def forecast_job(job: Job) -> Job:
    """Forecast the newly submitted job (its estimated start and, with a deadline,
    whether it makes it), write both on it and return it."""
    predicted = forecast()
    job.estimated_start_at = predicted.start_of(job.job_id)
    job.deadline_forecast = predicted.deadlines.get(job.job_id)
    written = Job.objects.filter(pk=job.pk, status=JobStatus.QUEUED)
    atomic_retrying_deadlocks(  # beside the job manager's pass, which writes jobs too
        partial(
            written.update,
            estimated_start_at=job.estimated_start_at,
            deadline_forecast=job.deadline_forecast,
        )
    )
    return job


@dataclass(frozen=True)
class DeadlineSummary:
    """Deadlines of a VC's jobs that ended within the window, and those still ahead."""

    since: datetime
    ended: int  # ended jobs that had a deadline
    met: int  # of those, finished successfully by it
    met_rate: float | None  # met / ended; None when none ended
    pending: int  # jobs with a deadline still waiting or running
    predicted_late: int  # of those, predicted to miss it


def deadline_summary(vc: VirtualCluster, days: int) -> DeadlineSummary:
    """The VC's met-deadline rate over the last ``days`` days."""
    since = timezone.now() - timedelta(days=days)
    with_deadline = Job.objects.filter(vc=vc, deadline__isnull=False)
    ended = with_deadline.filter(status__in=TERMINAL_STATUSES, finished_at__gte=since)
    met = ended.filter(status=JobStatus.FINISHED, finished_at__lte=F("deadline")).count()
    count = ended.count()
    pending = with_deadline.filter(Q(status=JobStatus.QUEUED) | Q(status__in=ACTIVE_STATUSES))
    return DeadlineSummary(
        since=since,
        ended=count,
        met=met,
        met_rate=met / count if count else None,
        pending=pending.count(),
        predicted_late=pending.filter(deadline_forecast=False).count(),
    )
