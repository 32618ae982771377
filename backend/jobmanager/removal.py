"""Removing a node through the API: at once when no job runs there, else drained.

A node being drained takes no new work (it is cordoned) and is removed by the job
manager's next pass once no job holds it; jobs still there after the drain deadline
(``TRAINYARD_REPAIR_DRAIN_SECONDS``, as for a node the repair manager takes out) are
moved to other nodes, back at the head of their queues without spending a retry.
Only where the registered nodes are the inventory (the embedded default): a backend that
discovers its nodes (Kubernetes) would register a removed one again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from backend.clusters.models import Node
from backend.core.exceptions import ActionRefused
from backend.core.job_manager_triggers import run_job_manager_after_commit


def jobs_on(node_name: str) -> list[str]:
    """The jobs holding resources on the node (running, starting or being stopped)."""
    from backend.jobs.models import ACTIVE_STATUSES, Job

    active = Job.objects.filter(status__in=ACTIVE_STATUSES)
    return list(active.on_node(node_name).values_list("job_id", flat=True))


@transaction.atomic
def request_node_removal(node: Node, actor: User | None = None) -> bool:
    """Remove the node now if no job runs there (True); else cordon it to drain (False).
    ActionRefused where the cluster backend discovers its nodes itself."""
    from backend.clusters.backends import inventory_is_registered

    if not inventory_is_registered():
        raise ActionRefused(
            f"The {settings.TRAINYARD_BACKEND} backend reports its own nodes and would "
            f"register {node.name} again: remove it there (Kubernetes: kubectl drain, then "
            "kubectl delete node); cordon it here to keep work off it meanwhile."
        )
    node = Node.objects.select_for_update().get(pk=node.pk)
    run_job_manager_after_commit()  # a node gone, or cordoned, changes what fits
    if not jobs_on(node.name):
        node.delete()
        return True
    node.schedulable = False
    node.removal_requested_at = node.removal_requested_at or timezone.now()
    node.save(update_fields=["schedulable", "removal_requested_at"])
    return False


def remove_drained_nodes(now: datetime | None = None) -> list[str]:
    """Remove the nodes being drained that no job holds any more; move the jobs off
    those past the drain deadline. Returns the nodes removed."""
    from backend.repairs.actions import move_jobs_off

    now = now or timezone.now()
    deadline = timedelta(seconds=settings.TRAINYARD_REPAIR_DRAIN_SECONDS)
    removed: list[str] = []
    for node in Node.objects.filter(removal_requested_at__isnull=False):
        if not jobs_on(node.name):
            with transaction.atomic():
                if Node.objects.filter(pk=node.pk, removal_requested_at__isnull=False).exists():
                    Node.objects.filter(pk=node.pk).delete()
                    removed.append(node.name)
                    run_job_manager_after_commit()
        elif node.removal_requested_at is not None and now - node.removal_requested_at >= deadline:
            why = "removed from the cluster (drain deadline passed)"
            move_jobs_off(node.name, why, now, leaving="a node being removed")
    return removed
