"""What jobs hold and want: per-node use, per-VC use and queued demand, per GPU type."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, F, Sum

from backend.jobs.models import ACTIVE_STATUSES, Job, JobStatus


@dataclass
class Resources:
    gpus: int = 0
    cpus: Decimal = field(default_factory=Decimal)
    memory: int = 0
    jobs: int = 0  # how many jobs the totals are of (not part of as_dict)

    def as_dict(self) -> dict[str, object]:
        return {"gpus": self.gpus, "cpus": float(self.cpus), "memory": self.memory}


def worker_gpu_count(worker: dict) -> int:
    """A placement entry names its GPUs as a list of device indices (or just a count)."""
    gpus = worker.get("gpus", 0)
    return len(gpus) if isinstance(gpus, list) else int(gpus)


def used_by_node() -> dict[str, Resources]:
    """Resources held on each node by the jobs that occupy it now."""
    used: dict[str, Resources] = defaultdict(Resources)
    placements = Job.objects.filter(status__in=ACTIVE_STATUSES).values_list("placement", flat=True)
    for placement in placements:
        for worker in placement or []:
            node_use = used[worker["node"]]
            node_use.gpus += worker_gpu_count(worker)
            node_use.cpus += Decimal(str(worker.get("cpus", 0)))
            node_use.memory += int(worker.get("memory", 0))
    return used


def _totals_by_gpu_type(jobs) -> dict[str, Resources]:
    rows = jobs.values("gpu_type__name").annotate(
        gpus=Sum(F("workers") * F("gpus_per_worker")),
        cpus=Sum(F("workers") * F("cpus_per_worker")),
        memory=Sum(F("workers") * F("memory_per_worker")),
        jobs=Count("id"),
    )
    return {
        row["gpu_type__name"]: Resources(
            gpus=int(row["gpus"] or 0),
            cpus=Decimal(str(row["cpus"] or 0)),
            memory=int(row["memory"] or 0),
            jobs=row["jobs"],
        )
        for row in rows
    }


def vc_used(vc_id: int) -> dict[str, Resources]:
    """Resources a VC's jobs hold now, per GPU type."""
    return _totals_by_gpu_type(Job.objects.filter(vc_id=vc_id, status__in=ACTIVE_STATUSES))


def vc_borrowed(vc_id: int) -> dict[str, Resources]:
    """Resources a VC's jobs hold beyond its quota (as preemptible work), per GPU type."""
    return _totals_by_gpu_type(
        Job.objects.filter(vc_id=vc_id, status__in=ACTIVE_STATUSES, borrowing=True)
    )


def vc_queued(vc_id: int) -> dict[str, Resources]:
    """Resources a VC's waiting jobs ask for, per GPU type."""
    return _totals_by_gpu_type(Job.objects.filter(vc_id=vc_id, status=JobStatus.QUEUED))


def user_guaranteed_gpus(user_id: int, vc_id: int) -> int:
    """GPUs a user's non-preemptible jobs in a VC hold or wait for (the per-user limit)."""
    statuses = (JobStatus.QUEUED, *ACTIVE_STATUSES)
    total = Job.objects.filter(
        owner_id=user_id, vc_id=vc_id, preemptible=False, status__in=statuses
    ).aggregate(gpus=Sum(F("workers") * F("gpus_per_worker")))["gpus"]
    return int(total or 0)
