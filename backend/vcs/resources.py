"""A VC's quota, use, queued demand and free resources per GPU type."""

from __future__ import annotations

from collections import defaultdict

from backend.clusters.capacity import node_capacities
from backend.jobs.usage import Resources, vc_queued, vc_used
from backend.vcs.models import VirtualCluster


def idle_gpus_by_type() -> dict[str, int]:
    idle: dict[str, int] = defaultdict(int)
    for capacity in node_capacities():
        idle[capacity.node.gpu_type.name] += capacity.free_gpus
    return idle


def vc_resources(vc: VirtualCluster) -> list[dict[str, object]]:
    """One row per GPU type the VC has a quota for or uses.

    ``free`` is what the VC may still start as guaranteed work (quota less use);
    ``cluster_idle_gpus`` is what it could borrow, as preemptible work, right now.
    """
    quotas = {quota.gpu_type.name: quota for quota in vc.quotas.select_related("gpu_type")}
    used = vc_used(vc.id)
    queued = vc_queued(vc.id)
    idle = idle_gpus_by_type()
    rows = []
    for name in sorted(set(quotas) | set(used) | set(queued)):
        quota = quotas.get(name)
        quota_resources = Resources(quota.gpus, quota.cpus, quota.memory) if quota else Resources()
        in_use = used.get(name, Resources())
        rows.append(
            {
                "gpu_type": name,
                "quota": quota_resources.as_dict(),
                "used": in_use.as_dict(),
                "queued": queued.get(name, Resources()).as_dict(),
                "free": Resources(
                    max(quota_resources.gpus - in_use.gpus, 0),
                    max(quota_resources.cpus - in_use.cpus, 0),
                    max(quota_resources.memory - in_use.memory, 0),
                ).as_dict(),
                "cluster_idle_gpus": idle.get(name, 0),
            }
        )
    return rows
