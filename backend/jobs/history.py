"""What jobs ran before, as the scheduler weighs it: each job's attained GPU-seconds over
its ended attempts (least attained service) and each VC member's decayed usage (fair
share). One query each per pass, over attempts only: a queue of ten thousand jobs that
never ran costs an index lookup, not a row per job."""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from backend.jobs.models import ACTIVE_STATUSES, JobAttempt, JobStatus
from backend.vcs.models import SchedulingPolicy, VirtualCluster

# Usage older than this many half-lives (a thousandth of its weight) is not read.
HORIZON_HALF_LIVES = 10


@dataclass(frozen=True, slots=True)
class Attained:
    """What a job ran over its ended attempts, and when it last stopped."""

    gpu_seconds: float
    last_ended: datetime


def attained_service() -> dict[str, Attained]:
    """Each queued or running job that ran before: GPUs x run time of each of its ended
    attempts (a running job's current attempt is not counted: the core adds it), by job id."""
    rows = JobAttempt.objects.filter(
        job__status__in=(JobStatus.QUEUED, *ACTIVE_STATUSES), ended_at__isnull=False
    ).values_list("job__job_id", "job__workers", "job__gpus_per_worker", "started_at", "ended_at")
    gpu_seconds: dict[str, float] = defaultdict(float)
    last_ended: dict[str, datetime] = {}
    for job_id, workers, gpus, started, ended in rows.order_by():
        if ended is None:  # filtered out above; the column may be empty
            continue
        gpu_seconds[job_id] += workers * gpus * max(0.0, (ended - started).total_seconds())
        if job_id not in last_ended or ended > last_ended[job_id]:
            last_ended[job_id] = ended
    return {job_id: Attained(gpu_seconds[job_id], last_ended[job_id]) for job_id in last_ended}


def decayed_gpu_seconds(
    gpus: int, started: datetime, ended: datetime, now: datetime, half_life: float
) -> float:
    """The GPU-seconds of a run from ``started`` to ``ended``, each second weighing half as
    much ``half_life`` seconds later: gpus x the integral of 2^-(age / half_life)."""
    if ended <= started:
        return 0.0
    rate = math.log(2) / half_life
    end_age = max(0.0, (now - ended).total_seconds())
    start_age = max(end_age, (now - started).total_seconds())
    return gpus * (math.exp(-rate * end_age) - math.exp(-rate * start_age)) / rate


def decayed_usage(now: datetime) -> dict[tuple[str, str], float]:
    """Each (VC, member)'s decayed GPU-seconds over the ended attempts of the jobs of the
    VCs that share fairly (fair share, and LAS within its queues), each VC with its own
    half-life (its usage_half_life_hours).

    A process keeps the sums between calls: usage decays by the same factor whatever its
    age, so the sums are decayed to ``now`` and only attempts ended since are read. The
    whole history is read again when the count of ended attempts says a row changed other
    than by ending (one written late, a purge, a database made anew as between tests),
    when a half-life changed, and every ``FULL_READ_EVERY`` (dropping what aged past the
    horizon): reading every attempt of the horizon was most of an idle round's time once
    a few thousand jobs had run."""
    half_lives = {
        name: hours * 3600.0
        for name, hours in VirtualCluster.objects.filter(
            policy__in=(SchedulingPolicy.FAIR_SHARE, SchedulingPolicy.LEAST_ATTAINED_SERVICE)
        ).values_list("name", "usage_half_life_hours")
    }
    if not half_lives:
        return {}
    with _usage_lock:
        global _usage
        ended = JobAttempt.objects.filter(ended_at__isnull=False).count()
        kept = _usage
        if kept is None or not kept.brought_to(now, half_lives, ended):
            kept = _Usage.read(now, half_lives, ended)
        _usage = kept
        return dict(kept.usage)


# Attempts are read again this far behind the latest end folded in (an end committed after
# a later one was read is still found; each is folded in once); the whole history is read
# again this often.
USAGE_OVERLAP = timedelta(seconds=3)
FULL_READ_EVERY = timedelta(minutes=10)
USAGE_COLUMNS = (
    "pk", "job__vc__name", "job__owner__username", "job__workers", "job__gpus_per_worker",
    "started_at", "ended_at",
)  # fmt: skip


@dataclass
class _Usage:
    """Decayed usage as of ``as_of``, with what it was read from."""

    usage: dict[tuple[str, str], float]
    as_of: datetime
    read_at: datetime  # the last reading of the whole horizon
    half_lives: dict[str, float]
    ended: int  # attempts ended in all, as counted when last brought up to date
    latest: tuple[int, datetime] | None  # the attempt that ended last of those read: pk, end
    recent: dict[int, datetime] = field(default_factory=dict)  # folded within the overlap

    @classmethod
    def read(cls, now: datetime, half_lives: dict[str, float], ended: int) -> _Usage:
        """From every attempt within the horizon of the longest half-life."""
        since = now - timedelta(seconds=HORIZON_HALF_LIVES * max(half_lives.values()))
        kept = cls({}, now, now, half_lives, ended, None)
        rows = JobAttempt.objects.filter(
            job__vc__name__in=list(half_lives), ended_at__gt=since
        ).values_list(*USAGE_COLUMNS)
        kept.fold(rows.order_by(), now)
        # Where the next call reads from: the attempt of any VC that ended last.
        last = (
            JobAttempt.objects.filter(ended_at__isnull=False)
            .order_by("-ended_at", "-pk")
            .values_list("pk", "ended_at")
            .first()
        )
        if last is not None and last[1] is not None:  # none: fold found none either
            kept.latest = (last[0], last[1])
            tail = JobAttempt.objects.filter(ended_at__gte=last[1] - USAGE_OVERLAP)
            kept.recent = {
                pk: ended for pk, ended in tail.order_by().values_list("pk", "ended_at") if ended
            }
        return kept

    def brought_to(self, now: datetime, half_lives: dict[str, float], ended: int) -> bool:
        """Decay the sums to ``now`` and fold in the attempts ended since; False (nothing
        changed) where only a whole reading will do."""
        if (
            half_lives != self.half_lives
            or now < self.as_of
            or now - self.read_at > FULL_READ_EVERY
        ):
            return False
        new = []
        if self.latest is not None:
            pk, latest = self.latest
            if not JobAttempt.objects.filter(pk=pk, ended_at=latest).exists():
                return False  # purged, rewritten, or another database (as between tests)
            rows = JobAttempt.objects.filter(ended_at__gte=latest - USAGE_OVERLAP)
            new = [
                row
                for row in rows.order_by().values_list(*USAGE_COLUMNS)
                if self.recent.get(row[0]) != row[6]
            ]
        if self.ended + len(new) != ended:
            return False
        elapsed = (now - self.as_of).total_seconds()
        for key in self.usage:
            self.usage[key] *= math.exp(-math.log(2) * elapsed / half_lives[key[0]])
        self.as_of, self.ended = now, ended
        self.fold(new, now)
        return True

    def fold(self, rows: Iterable[tuple], now: datetime) -> None:
        """Add each ended attempt's decayed GPU-seconds to its (VC, member)'s sum (those of
        VCs that do not share fairly are only noted as read)."""
        for pk, vc, user, workers, gpus, started, ended in rows:
            if ended is None:
                continue
            if vc in self.half_lives:
                key = (vc, user or "")
                self.usage[key] = self.usage.get(key, 0.0) + decayed_gpu_seconds(
                    workers * gpus, started, ended, now, self.half_lives[vc]
                )
            self.recent[pk] = ended
            if self.latest is None or (ended, pk) > (self.latest[1], self.latest[0]):
                self.latest = (pk, ended)
        if self.latest is not None:
            edge = self.latest[1] - USAGE_OVERLAP
            self.recent = {pk: ended for pk, ended in self.recent.items() if ended >= edge}


_usage: _Usage | None = None
_usage_lock = threading.Lock()
