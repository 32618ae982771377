"""A VC's quota, use, queued demand and free resources per GPU type; every VC's use."""

from __future__ import annotations

from collections import Counter, defaultdict

from django.db.models import F, Sum

from backend.core.quantities import millicpus
from backend.jobs.capacity import fragmentation, free_gpu_histograms, node_capacities
from backend.jobs.models import ACTIVE_STATUSES, Job, JobStatus
from backend.jobs.usage import JobTotals, resources_dict, vc_borrowed, vc_queued, vc_used
from backend.vcs.models import Quota, VirtualCluster
from jobmanager.core import Resources


def vc_resources(vc: VirtualCluster) -> list[dict[str, object]]:
    """One row per GPU type the VC has a quota for or uses.

    ``free`` is what the VC may still start as guaranteed work (quota less use);
    ``cluster_idle_gpus`` is what it could borrow, as preemptible work, right now, and
    ``fragmentation`` how those idle GPUs lie: schedulable nodes by their free GPUs.
    """
    quotas = {quota.gpu_type.name: quota for quota in vc.quotas.select_related("gpu_type")}
    used = vc_used(vc.id)
    borrowed = vc_borrowed(vc.id)
    queued = vc_queued(vc.id)
    histograms = free_gpu_histograms(node_capacities())
    rows = []
    for name in sorted(set(quotas) | set(used) | set(queued)):
        quota = quotas.get(name)
        quota_resources = (
            Resources(quota.gpus, millicpus(quota.cpus), quota.memory) if quota else Resources()
        )
        in_use, waiting = used.get(name, JobTotals()), queued.get(name, JobTotals())
        histogram = histograms.get(name, Counter())
        rows.append(
            {
                "gpu_type": name,
                "quota": resources_dict(quota_resources),
                "used": resources_dict(in_use.resources),
                "queued": resources_dict(waiting.resources),
                "free": resources_dict(
                    Resources(
                        max(quota_resources.gpus - in_use.resources.gpus, 0),
                        max(quota_resources.millicpus - in_use.resources.millicpus, 0),
                        max(quota_resources.memory - in_use.resources.memory, 0),
                    )
                ),
                "running_jobs": in_use.jobs,
                "queued_jobs": waiting.jobs,
                "borrowed_gpus": borrowed.get(name, JobTotals()).resources.gpus,
                "cluster_idle_gpus": sum(free * nodes for free, nodes in histogram.items()),
                "fragmentation": fragmentation(histogram),
            }
        )
    return rows


def every_vc_usage() -> list[dict[str, object]]:
    """Per VC and GPU type: quota, GPUs in use and GPUs asked for by waiting jobs.
    Aggregates only: no job of another tenant is named."""
    gpus = Sum(F("workers") * F("gpus_per_worker"))
    rows: dict[tuple[str, str], dict[str, object]] = defaultdict(dict)
    for quota in Quota.objects.values("vc__name", "gpu_type__name", "gpus"):
        rows[(quota["vc__name"], quota["gpu_type__name"])]["quota_gpus"] = quota["gpus"]
    for key, statuses in (("used_gpus", ACTIVE_STATUSES), ("queued_gpus", (JobStatus.QUEUED,))):
        totals = (
            Job.objects.filter(status__in=statuses)
            .order_by()
            .values("vc__name", "gpu_type__name")
            .annotate(gpus=gpus)
        )
        for total in totals:
            rows[(total["vc__name"], total["gpu_type__name"])][key] = int(total["gpus"] or 0)
    return [
        {
            "vc": vc,
            "gpu_type": gpu_type,
            "quota_gpus": row.get("quota_gpus", 0),
            "used_gpus": row.get("used_gpus", 0),
            "queued_gpus": row.get("queued_gpus", 0),
        }
        for (vc, gpu_type), row in sorted(rows.items())
    ]
