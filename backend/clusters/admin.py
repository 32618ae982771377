"""The cluster's inventory in the Django admin, written through the cluster actions: a node
added, changed or removed there asks the job manager for a pass as the API's do. Readiness
(from the cluster backend) and the repair state (the repair cycle's) are shown only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from backend.clusters import actions
from backend.clusters.models import GpuType, Node
from backend.core.admin import ActionAdmin, admin_user

# Set on a request whose node was cordoned to drain rather than deleted.
DRAINING = "trainyard_node_draining"


@admin.register(GpuType)
class GpuTypeAdmin(ActionAdmin):
    list_display = ["name", "cpus_per_gpu", "memory_per_gpu"]

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> GpuType:
        return actions.create_gpu_type(**fields)

    def update(self, request: HttpRequest, obj: GpuType, changes: dict[str, Any]) -> GpuType:
        return actions.update_gpu_type(obj, changes)


@admin.register(Node)
class NodeAdmin(ActionAdmin):
    list_display = [
        "name", "gpu_type", "gpus", "cpus", "memory", "schedulable", "repair_state", "ready",
        "dedicated_vc",
    ]  # fmt: skip
    list_filter = ["gpu_type", "schedulable", "repair_state", "ready", "dedicated_vc"]
    search_fields = ["name"]
    readonly_fields = [
        "repair_state", "ready", "ready_reason", "last_heartbeat", "removal_requested_at",
        "created_at",
    ]  # fmt: skip

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> Node:
        return actions.register_node(**fields)

    def update(self, request: HttpRequest, obj: Node, changes: dict[str, Any]) -> Node:
        return actions.update_node(obj, changes)

    def delete(self, request: HttpRequest, obj: Node) -> None:
        """Removed at once when no job runs there; else cordoned and drained (as the API's
        DELETE), which the message says."""
        if not actions.remove_node(obj, admin_user(request)):
            setattr(request, DRAINING, True)
            self.message_user(
                request,
                f"Jobs run on {obj.name}: it is cordoned and drained, and goes once they end.",
                messages.WARNING,
            )

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        if getattr(request, DRAINING, False):  # not deleted: no "deleted successfully"
            return HttpResponseRedirect(reverse("admin:clusters_node_changelist"))
        return super().response_delete(request, obj_display, obj_id)
