"""What jobs hold and want: per-VC use and queued demand, per GPU type."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, F, Sum

from backend.core.quantities import millicpus
from backend.jobs.models import ACTIVE_STATUSES, Job, JobStatus
from jobmanager.core import Resources
from jobmanager.core.snapshot import NO_RESOURCES


def resources_dict(resources: Resources) -> dict[str, object]:
    """As the API shows resources: GPUs, CPUs (not millicpus) and memory in MiB."""
    return {
        "gpus": resources.gpus,
        "cpus": resources.millicpus / 1000,
        "memory": resources.memory,
    }


@dataclass(frozen=True)
class JobTotals:
    """What some jobs hold or ask for together, and how many jobs they are."""

    resources: Resources = NO_RESOURCES
    jobs: int = 0


def _totals_by_gpu_type(jobs, workers=None) -> dict[str, JobTotals]:
    """What the jobs hold, per GPU type; ``workers``: how many workers of each to count
    (an expression; all of them by default)."""
    workers = F("workers") if workers is None else workers
    rows = jobs.values("gpu_type__name").annotate(
        gpus=Sum(workers * F("gpus_per_worker")),
        cpus=Sum(workers * F("cpus_per_worker")),
        memory=Sum(workers * F("memory_per_worker")),
        jobs=Count("id"),
    )
    return {
        row["gpu_type__name"]: JobTotals(
            Resources(
                gpus=int(row["gpus"] or 0),
                millicpus=millicpus(row["cpus"] or 0),
                memory=int(row["memory"] or 0),
            ),
            jobs=row["jobs"],
        )
        for row in rows
    }


def vc_used(vc_id: int) -> dict[str, JobTotals]:
    """Resources a VC's jobs hold now, per GPU type."""
    return _totals_by_gpu_type(Job.objects.filter(vc_id=vc_id, status__in=ACTIVE_STATUSES))


def vc_borrowed(vc_id: int) -> dict[str, JobTotals]:
    """Resources a VC's jobs hold beyond its quota (as preemptible work), per GPU type:
    borrowing jobs whole, and the workers of elastic jobs above their min_workers."""
    active = Job.objects.filter(vc_id=vc_id, status__in=ACTIVE_STATUSES)
    whole = _totals_by_gpu_type(active.filter(borrowing=True))
    extras = _totals_by_gpu_type(
        active.filter(
            borrowing=False, workers__gt=F("min_workers"), max_workers__gt=F("min_workers")
        ),
        F("workers") - F("min_workers"),
    )
    return {
        name: _added(whole.get(name, JobTotals()), extras.get(name, JobTotals()))
        for name in whole.keys() | extras.keys()
    }


def _added(one: JobTotals, other: JobTotals) -> JobTotals:
    return JobTotals(one.resources + other.resources, one.jobs + other.jobs)


def vc_queued(vc_id: int) -> dict[str, JobTotals]:
    """Resources a VC's waiting jobs ask for, per GPU type."""
    return _totals_by_gpu_type(Job.objects.filter(vc_id=vc_id, status=JobStatus.QUEUED))


def user_guaranteed_gpus(user_id: int, vc_id: int) -> int:
    """GPUs a user's non-preemptible jobs in a VC hold or wait for (the per-user limit)."""
    statuses = (JobStatus.QUEUED, *ACTIVE_STATUSES)
    total = Job.objects.filter(
        owner_id=user_id, vc_id=vc_id, preemptible=False, status__in=statuses
    ).aggregate(gpus=Sum(F("workers") * F("gpus_per_worker")))["gpus"]
    return int(total or 0)
