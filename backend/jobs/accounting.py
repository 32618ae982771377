"""GPU-hours from what really ran: each attempt's GPUs from its start to its end (running
attempts up to now), cut to the asked window and, for series, to days or months.

**booked**: GPUs x hours held. **used**: booked weighted by the DCGM utilisation of
exactly those GPUs (the mean of Prometheus's points over the attempt, as the job page's
chart reads them); null, with the reason, where Prometheus has none. **idle**: booked
minus used. **borrowed**: the part of booked held beyond the VC's quota (preemptible work
on borrowed GPUs), counted apart as well as within booked: all of an attempt that borrowed,
and an elastic job's workers above min_workers. An attempt's GPUs follow its resizes
(``JobAttempt.sizes``); one recorded before sizes were kept holds its start size all along.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from backend.jobs.metrics import attempt_selector
from backend.jobs.models import TERMINAL_STATUSES, JobAttempt
from repairmanager.prometheus import PrometheusClient, PrometheusUnavailable

GROUPS = ("cluster", "vc", "user", "job", "gpu_type")
BUCKETS = ("day", "month")
POINTS_PER_ATTEMPT = 120
MIN_STEP_SECONDS = 15
MAX_MEASURED_ATTEMPTS = 500  # one Prometheus query each


@dataclass
class Row:
    key: str
    bucket: str | None
    booked: float = 0.0
    used: float | None = 0.0
    borrowed: float = 0.0
    reasons: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, object]:
        used = None if self.used is None else round(self.used, 4)
        return {
            "key": self.key,
            **({"bucket": self.bucket} if self.bucket is not None else {}),
            "booked_gpu_hours": round(self.booked, 4),
            "used_gpu_hours": used,
            "idle_gpu_hours": None if used is None else round(max(0.0, self.booked - used), 4),
            "borrowed_gpu_hours": round(self.borrowed, 4),
            "used_unavailable_reason": "; ".join(sorted(self.reasons)),
        }


@dataclass
class Piece:
    """Part of one attempt inside one bucket (or the whole window)."""

    bucket: str | None
    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


def bucket_start(moment: datetime, bucket: str) -> datetime:
    moment = moment.astimezone(UTC)
    if bucket == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_bucket(start: datetime, bucket: str) -> datetime:
    if bucket == "day":
        return start + timedelta(days=1)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


def bucket_label(start: datetime, bucket: str) -> str:
    return start.strftime("%Y-%m-%d" if bucket == "day" else "%Y-%m")


def pieces(start: datetime, end: datetime, bucket: str | None) -> list[Piece]:
    if end <= start:
        return []
    if bucket is None:
        return [Piece(None, start, end)]
    found = []
    cursor = bucket_start(start, bucket)
    while cursor < end:
        following = next_bucket(cursor, bucket)
        found.append(Piece(bucket_label(cursor, bucket), max(start, cursor), min(end, following)))
        cursor = following
    return found


def attempts_in(
    visible_jobs: QuerySet, since: datetime, until: datetime, job_id: str | None = None
) -> QuerySet:
    """Attempts of the visible jobs that held GPUs at some time in [since, until)."""
    attempts = JobAttempt.objects.filter(job__in=visible_jobs, started_at__lt=until).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=since)
    )
    if job_id:
        attempts = attempts.filter(job__job_id=job_id)
    return attempts.select_related("job", "job__vc", "job__owner", "job__gpu_type")


def attempt_end(attempt: JobAttempt, now: datetime) -> datetime:
    """Its end; a running attempt's is now (an unclosed one of an ended job, the job's end)."""
    if attempt.ended_at is not None:
        return attempt.ended_at
    if attempt.job.status in TERMINAL_STATUSES and attempt.job.finished_at is not None:
        return attempt.job.finished_at
    return now


def gpu_count(attempt: JobAttempt) -> int:
    return attempt.gpu_count


class Utilisation:
    """Mean utilisation (0..1) of an attempt's GPUs within a time range, from Prometheus."""

    def __init__(self, measure: bool, attempts: int) -> None:
        self.reason = ""
        self.client = None
        if not settings.TRAINYARD_PROMETHEUS_URL:
            self.reason = "no metrics source is configured (TRAINYARD_PROMETHEUS_URL)"
        elif not measure:
            self.reason = "not asked for"
        elif attempts > MAX_MEASURED_ATTEMPTS:
            self.reason = (
                f"{attempts} attempts are more than {MAX_MEASURED_ATTEMPTS} to measure: "
                "narrow since/until"
            )
        else:
            self.client = PrometheusClient(
                settings.TRAINYARD_PROMETHEUS_URL, timeout=settings.TRAINYARD_PROMETHEUS_TIMEOUT
            )

    def points(
        self, attempt: JobAttempt, start: datetime, end: datetime
    ) -> tuple[list[list[tuple[float, float]]] | None, str]:
        """Per GPU, its (time, %) points; None with the reason when not known."""
        if self.client is None:
            return None, self.reason
        selector = attempt_selector(attempt)
        if not selector:
            return None, "the attempt's GPUs are not known"
        duration = (end - start).total_seconds()
        step = max(MIN_STEP_SECONDS, math.ceil(duration / POINTS_PER_ATTEMPT))
        # Points end at the end (or now), as the job page's chart reads them: an attempt
        # younger than a step still has one.
        first = end.timestamp() - (end - start).total_seconds() // step * step
        try:
            series = self.client.query_range(selector, first, end.timestamp(), step)
        except PrometheusUnavailable as error:
            return None, f"GPU metrics cannot be read now: {error}"
        if len(series) < gpu_count(attempt) or not all(one.points for one in series):
            return None, "Prometheus holds no GPU metrics for some of the attempt's GPUs"
        return [one.points for one in series], ""


def _mean_in(per_gpu: list[list[tuple[float, float]]], piece: Piece) -> float | None:
    """The mean over GPUs of each GPU's mean (%) in the piece (its points there, else all)."""
    start, end = piece.start.timestamp(), piece.end.timestamp()
    means = []
    for points in per_gpu:
        inside = [value for at, value in points if start <= at <= end] or [v for _, v in points]
        means.append(sum(inside) / len(inside))
    return sum(means) / len(means) if means else None


def gpu_hours(
    visible_jobs: QuerySet,
    group_by: str,
    since: datetime,
    until: datetime,
    bucket: str | None = None,
    job_id: str | None = None,
    measure: bool = True,
    now: datetime | None = None,
) -> list[dict[str, object]]:
    """Rows of booked, used, idle and borrowed GPU-hours per group (and bucket)."""
    now = now or timezone.now()
    until = min(until, now)
    attempts = [a for a in attempts_in(visible_jobs, since, until, job_id) if gpu_count(a)]
    utilisation = Utilisation(measure, len(attempts))
    rows: dict[tuple[str, str | None], Row] = {}
    for attempt in attempts:
        key = _group_key(attempt, group_by)
        start, end = max(attempt.started_at, since), min(attempt_end(attempt, now), until)
        parts = pieces(start, end, bucket)
        if not parts:
            continue
        per_gpu, reason = utilisation.points(attempt, start, end)
        for piece, gpus, borrowed_gpus in _sized(attempt, parts, now):
            row = rows.setdefault((key, piece.bucket), Row(key, piece.bucket))
            booked = gpus * piece.hours
            row.booked += booked
            row.borrowed += borrowed_gpus * piece.hours
            mean = _mean_in(per_gpu, piece) if per_gpu is not None else None
            if mean is None:  # one attempt unmeasured: the row's used hours are unknown
                row.used = None
                row.reasons.add(reason or "no utilisation points")
            elif row.used is not None:
                row.used += booked * min(100.0, max(0.0, mean)) / 100
    return [row.as_dict() for _, row in sorted(rows.items(), key=lambda item: _order(item[0]))]


def _sized(attempt: JobAttempt, parts: list[Piece], now: datetime) -> list[tuple[Piece, int, int]]:
    """Each piece cut at the attempt's resizes, with the GPUs and borrowed GPUs it held
    there (an elastic job's workers above min_workers borrowed)."""
    spans = attempt.sizes_over(attempt_end(attempt, now))
    found = []
    for piece in parts:
        for since, until, gpus, borrowed in spans:
            start, end = max(piece.start, since), min(piece.end, until)
            if end > start and gpus:
                found.append((Piece(piece.bucket, start, end), gpus, min(borrowed, gpus)))
    return found


def _order(key: tuple[str, str | None]) -> tuple[str, str]:
    return (key[1] or "", key[0])


def _group_key(attempt: JobAttempt, group_by: str) -> str:
    job = attempt.job
    return {
        "cluster": lambda: "cluster",
        "vc": lambda: job.vc.name,
        "user": lambda: job.owner.get_username(),
        "job": lambda: job.job_id,
        "gpu_type": lambda: job.gpu_type.name,
    }[group_by]()
