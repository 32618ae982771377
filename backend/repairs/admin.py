"""The repair cycle's records in the Django admin, shown only: the repair manager and the
repair actions write them (a node's state moves by ``move_node``, through the API)."""

from django.contrib import admin

from backend.core.admin import ReadOnlyAdmin
from backend.repairs.models import NodeFault, NodeRepairEvent, RepairMove


@admin.register(NodeRepairEvent)
class NodeRepairEventAdmin(ReadOnlyAdmin):
    list_display = ["node", "from_state", "to_state", "actor_name", "rule", "created_at"]
    list_filter = ["to_state", "rule"]
    search_fields = ["node__name", "reason"]


@admin.register(NodeFault)
class NodeFaultAdmin(ReadOnlyAdmin):
    list_display = ["node", "rule", "detail", "first_seen", "fired_at", "cleared_at", "outcome"]
    list_filter = ["rule", "severity"]
    search_fields = ["node__name", "rule"]


@admin.register(RepairMove)
class RepairMoveAdmin(ReadOnlyAdmin):
    list_display = ["job", "node", "fault", "moved_at", "restarted_on"]
