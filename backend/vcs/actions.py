"""Changes to virtual clusters: creation, settings, quotas, members."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.models import User
from django.db import transaction

from backend.clusters.models import GpuType
from backend.core.changes import save_changes
from backend.vcs.models import Membership, Quota, VirtualCluster

VC_SETTINGS = (
    "description",
    "notification",
    "policy",
    "max_wall_time",
    "interactive_wall_time",
    "max_interactive_gpus",
    "default_max_retries",
    "lends_dedicated_nodes",
    "infeasible_deadlines",
    "whole_nodes_for_distributed",
    "user_gpu_limit",
    "idle_util_percent",
    "idle_warn_minutes",
    "idle_kill_minutes",
    "interactive_idle_warn_minutes",
    "interactive_idle_kill_minutes",
    "queue_wait_alert_minutes",
    "usage_half_life_hours",
    "wait_limit_hours",
)


@dataclass(frozen=True)
class QuotaSpec:
    gpu_type: GpuType
    gpus: int
    cpus: Decimal | None = None
    memory: int | None = None


def create_vc(name: str, description: str = "", **vc_settings: object) -> VirtualCluster:
    return VirtualCluster.objects.create(name=name, description=description, **vc_settings)


def update_vc_settings(vc: VirtualCluster, changes: dict[str, object]) -> VirtualCluster:
    """Apply a VC admin's changes to the settings listed in VC_SETTINGS."""
    unknown = set(changes) - set(VC_SETTINGS)
    if unknown:
        raise ValueError(f"Not VC settings: {', '.join(sorted(unknown))}")
    return save_changes(vc, changes)


@transaction.atomic
def set_vc_quotas(vc: VirtualCluster, quotas: list[QuotaSpec]) -> list[Quota]:
    """Replace all of a VC's quotas. CPU and memory left out follow the GPU type's t-shirt size."""
    Quota.objects.filter(vc=vc).exclude(gpu_type__in=[q.gpu_type for q in quotas]).delete()
    stored = []
    for spec in quotas:
        cpus = spec.cpus if spec.cpus is not None else spec.gpu_type.cpus_per_gpu * spec.gpus
        memory = (
            spec.memory if spec.memory is not None else spec.gpu_type.memory_per_gpu * spec.gpus
        )
        quota, _ = Quota.objects.update_or_create(
            vc=vc,
            gpu_type=spec.gpu_type,
            defaults={"gpus": spec.gpus, "cpus": cpus, "memory": memory},
        )
        stored.append(quota)
    return stored


def set_membership(vc: VirtualCluster, user: User, role: str) -> Membership:
    """Add a member, or change their role."""
    membership, _ = Membership.objects.update_or_create(vc=vc, user=user, defaults={"role": role})
    return membership


def remove_membership(vc: VirtualCluster, user: User) -> None:
    Membership.objects.filter(vc=vc, user=user).delete()
