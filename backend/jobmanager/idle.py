"""The idle watch (DLTS 1.1's idle auto-kill): a running job whose GPUs all stayed under
its VC's ``idle_util_percent`` for ``idle_warn_minutes`` gets an insight message and an
email to its owner; still idle ``idle_kill_minutes`` later, it is killed with reason
``idle``, an event and a second email. Interactive jobs follow the VC's own pair (or
none). Utilisation is read from Prometheus for exactly the GPUs of the job's current
attempt, as the job page's chart is; a job whose utilisation cannot be read is left
alone, and counted in ``trainyard_idle_watch_unmeasured_jobs`` (and the cluster admins
are emailed), as the repair manager's safety valve holds back rather than act blind.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from backend.core.instruments import IDLE_KILLS, IDLE_WATCH_UNMEASURED_JOBS
from backend.core.outbox import queue_email
from backend.jobs.actions import kill_job
from backend.jobs.metrics import attempt_selector
from backend.jobs.models import Job, JobAttempt, JobStatus, JobType
from backend.repairs.mail import cluster_admin_addresses
from repairmanager.prometheus import PrometheusClient, PrometheusUnavailable

logger = logging.getLogger(__name__)
IDLE_RULE = "idle"
MIN_WINDOW_SECONDS = 60


@dataclass(frozen=True)
class IdlePolicy:
    util_percent: int
    warn_minutes: int
    kill_minutes: int


@dataclass
class WatchSummary:
    watched: int = 0
    warned: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    unmeasured: list[str] = field(default_factory=list)
    reason: str = ""


def policy_for(job: Job) -> IdlePolicy | None:
    """The job's VC's idle policy for its type; None when off."""
    vc = job.vc
    if job.type == JobType.INTERACTIVE:
        warn, kill = vc.interactive_idle_warn_minutes, vc.interactive_idle_kill_minutes
    else:
        warn, kill = vc.idle_warn_minutes, vc.idle_kill_minutes
    return None if warn is None else IdlePolicy(vc.idle_util_percent, warn, kill)


def window_seconds() -> int:
    """How far back each pass looks: two of its intervals, so that passes overlap."""
    return max(MIN_WINDOW_SECONDS, 2 * settings.TRAINYARD_IDLE_WATCH_INTERVAL)


def recent_peak(client: PrometheusClient, attempt: JobAttempt, gpus: int) -> float | None:
    """The highest utilisation (%) any of the attempt's GPUs had over the window; None
    when Prometheus has no points for one of them."""
    selector = attempt_selector(attempt)
    if not selector:
        return None
    end = time.time()
    window = window_seconds()
    step = max(1, window // 30)
    # The last point at the end: even a GPU scraped only since a moment ago has one.
    series = client.query_range(selector, end - window // step * step, end, step)
    if len(series) < gpus or not all(one.points for one in series):
        return None
    return max(value for one in series for _, value in one.points)


def watch_idle_jobs(now: datetime | None = None) -> WatchSummary:
    """One pass over running GPU jobs. ``now`` is the clock the policy's minutes are
    counted on (utilisation is always read for the last window)."""
    now = now or timezone.now()
    summary = WatchSummary()
    running = Job.objects.filter(status=JobStatus.RUNNING, gpus_per_worker__gt=0).select_related(
        "vc", "owner", "gpu_type"
    )
    watched = [(job, policy) for job in running if (policy := policy_for(job)) is not None]
    summary.watched = len(watched)
    client = None
    if settings.TRAINYARD_PROMETHEUS_URL:
        client = PrometheusClient(
            settings.TRAINYARD_PROMETHEUS_URL, timeout=settings.TRAINYARD_PROMETHEUS_TIMEOUT
        )
    else:
        summary.reason = "no metrics source is configured (TRAINYARD_PROMETHEUS_URL)"
    for job, policy in watched:
        attempt = JobAttempt.objects.filter(job=job, number=job.attempt).first()
        if client is None or attempt is None:
            summary.unmeasured.append(job.job_id)
            continue
        try:
            peak = recent_peak(client, attempt, job.total_gpus)
        except PrometheusUnavailable as error:
            summary.reason = str(error)
            summary.unmeasured.append(job.job_id)
            continue
        if peak is None:
            summary.reason = summary.reason or "Prometheus holds no utilisation for their GPUs"
            summary.unmeasured.append(job.job_id)
        elif peak >= policy.util_percent:
            _busy(job)
            summary.busy.append(job.job_id)
        else:
            _idle(job, attempt, policy, now, summary)
    IDLE_WATCH_UNMEASURED_JOBS.set(len(summary.unmeasured))
    if summary.unmeasured:
        _alert_unmeasured(summary, now)
    return summary


def _busy(job: Job) -> None:
    """Used again: the clock starts over (and a warning is withdrawn)."""
    if job.idle_since is None and job.idle_warned_at is None:
        return
    changes: dict[str, object] = {"idle_since": None, "idle_warned_at": None}
    if job.idle_warned_at is not None:
        changes["insight_message"] = ""
    Job.objects.filter(pk=job.pk, attempt=job.attempt).update(**changes)


def _idle(
    job: Job, attempt: JobAttempt, policy: IdlePolicy, now: datetime, summary: WatchSummary
) -> None:
    since = job.idle_since
    if since is None or since < attempt.started_at:  # a mark of an earlier attempt
        since = max(attempt.started_at, now - timedelta(seconds=window_seconds()))
        Job.objects.filter(pk=job.pk, attempt=job.attempt).update(idle_since=since)
        job.idle_since, job.idle_warned_at = since, None
    warned = job.idle_warned_at
    if warned is None or warned < since:
        if now - since >= timedelta(minutes=policy.warn_minutes):
            _warn(job, policy, since, now)
            summary.warned.append(job.job_id)
    elif now - warned >= timedelta(minutes=policy.kill_minutes) and _kill(job, policy, since, now):
        summary.killed.append(job.job_id)


def _gpus_text(job: Job) -> str:
    return f"{job.total_gpus} {job.gpu_type.name}"


def _duration(delta: timedelta) -> str:
    hours, minutes = divmod(int(delta.total_seconds() // 60), 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _warn(job: Job, policy: IdlePolicy, since: datetime, now: datetime) -> None:
    deadline = now + timedelta(minutes=policy.kill_minutes)
    message = (
        f"Job {job.job_id} has used none of its {_gpus_text(job)} GPUs for "
        f"{_duration(now - since)} (all under {policy.util_percent} %); it will be killed at "
        f"{deadline:%Y-%m-%d %H:%M} UTC unless they are used."
    )
    with transaction.atomic():
        updated = Job.objects.filter(
            pk=job.pk, status=JobStatus.RUNNING, attempt=job.attempt
        ).update(idle_warned_at=now, insight_message=message)
        if updated and job.owner.email:
            queue_email(
                f"idle-warning:{job.job_id}:{job.attempt}:{since:%Y%m%d%H%M%S}",
                [job.owner.email],
                f"Job {job.job_id} ({job.name}) leaves its GPUs idle",
                f"{message}\n\nIts VC ({job.vc.name}) kills jobs that hold GPUs without "
                "using them, so that others can have them.",
            )


def _kill(job: Job, policy: IdlePolicy, since: datetime, now: datetime) -> bool:
    reason = (
        f"idle: its {_gpus_text(job)} GPUs stayed under {policy.util_percent} % for "
        f"{_duration(now - since)}"
    )
    with transaction.atomic():
        locked = Job.objects.select_for_update().filter(pk=job.pk).first()
        if locked is None or locked.status != JobStatus.RUNNING or locked.attempt != job.attempt:
            return False
        kill_job(locked, None, reason)
        Job.objects.filter(pk=job.pk).update(failure_rule=IDLE_RULE, insight_message=reason)
        if job.owner.email:
            queue_email(
                f"idle-kill:{job.job_id}:{job.attempt}",
                [job.owner.email],
                f"Job {job.job_id} ({job.name}) was killed: its GPUs were idle",
                f"Job {job.job_id} was killed ({reason}), as it was warned at "
                f"{job.idle_warned_at:%Y-%m-%d %H:%M} UTC.",
            )
    IDLE_KILLS.inc()
    logger.info("Idle watch killed %s: %s", job.job_id, reason)
    return True


def _alert_unmeasured(summary: WatchSummary, now: datetime) -> None:
    """Once an hour at most: the admins learn that the watch cannot see."""
    queue_email(
        f"idle-watch-unmeasured:{now:%Y%m%d%H}",
        cluster_admin_addresses(),
        f"Idle watch blind: {len(summary.unmeasured)} running jobs unmeasured",
        f"No job is warned or killed for idleness while its utilisation cannot be read.\n"
        f"Why: {summary.reason or 'unknown'}\nJobs: {', '.join(summary.unmeasured[:50])}",
    )
