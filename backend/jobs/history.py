"""What jobs ran before, as the scheduler weighs it: each job's attained GPU-seconds over
its ended attempts (least attained service) and each VC member's decayed usage (fair
share). One query each per pass, over attempts only: a queue of ten thousand jobs that
never ran costs an index lookup, not a row per job."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
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
    half-life (its usage_half_life_hours)."""
    half_lives = {
        name: hours * 3600.0
        for name, hours in VirtualCluster.objects.filter(
            policy__in=(SchedulingPolicy.FAIR_SHARE, SchedulingPolicy.LEAST_ATTAINED_SERVICE)
        ).values_list("name", "usage_half_life_hours")
    }
    if not half_lives:
        return {}
    since = now - timedelta(seconds=HORIZON_HALF_LIVES * max(half_lives.values()))
    rows = JobAttempt.objects.filter(
        job__vc__name__in=list(half_lives), ended_at__gt=since
    ).values_list(
        "job__vc__name", "job__owner__username", "job__workers", "job__gpus_per_worker",
        "started_at", "ended_at",
    )  # fmt: skip
    usage: dict[tuple[str, str], float] = defaultdict(float)
    for vc, user, workers, gpus, started, ended in rows.order_by():
        if ended is None:
            continue
        usage[(vc, user or "")] += decayed_gpu_seconds(
            workers * gpus, started, ended, now, half_lives[vc]
        )
    return dict(usage)
