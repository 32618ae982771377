"""The repair manager's records: every move of a node through the repair cycle, the faults
it watches, the jobs it moved off failing nodes."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from backend.clusters.models import Node, RepairState
from backend.core.querysets import ClusterWideQuerySet
from backend.jobs.models import Job


class NodeRepairEvent(models.Model):
    """A node moved from one repair state to another: by whom (a rule or an admin) and why."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="repair_events")
    from_state = models.CharField(max_length=20, choices=RepairState.choices)
    to_state = models.CharField(max_length=20, choices=RepairState.choices)
    reason = models.TextField()
    rule = models.CharField(max_length=100, blank=True, help_text="The rule that moved it.")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["node", "created_at", "id"]
        indexes = [models.Index(fields=["node", "created_at"], name="node_repair_event_idx")]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.from_state} -> {self.to_state}"


class NodeFault(models.Model):
    """A rule's condition holding on a node, from first seen until it clears. A fault with
    no node is about the repair manager itself (Prometheus unavailable)."""

    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, null=True, blank=True, related_name="faults"
    )
    rule = models.CharField(max_length=100)
    fault = models.CharField(max_length=300, help_text="What it is, in words.")
    detail = models.CharField(max_length=300, blank=True)
    severity = models.CharField(max_length=20)
    action = models.CharField(max_length=20)
    first_seen = models.DateTimeField(default=timezone.now)
    fired_at = models.DateTimeField(null=True, blank=True, help_text="Held long enough.")
    cleared_at = models.DateTimeField(null=True, blank=True)
    outcome = models.TextField(blank=True, help_text="What the repair manager did about it.")

    objects = ClusterWideQuerySet.as_manager()

    class Meta:
        ordering = ["-first_seen", "-id"]
        indexes = [models.Index(fields=["cleared_at", "node"], name="node_fault_open_idx")]

    def __str__(self) -> str:
        return f"{self.rule} on {self.node_id or 'the cluster'}"

    def describe(self) -> str:
        return f"{self.fault} on {self.detail}" if self.detail else self.fault


class RepairMove(models.Model):
    """A job moved off a failing node; ``restarted_on`` once it runs again elsewhere."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="repair_moves")
    attempt = models.PositiveSmallIntegerField(help_text="The attempt that was stopped.")
    node = models.CharField(max_length=100)
    fault = models.CharField(max_length=400)
    moved_at = models.DateTimeField(default=timezone.now)
    restarted_on = models.CharField(max_length=400, blank=True)

    class Meta:
        ordering = ["job", "moved_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id} off {self.node}"
