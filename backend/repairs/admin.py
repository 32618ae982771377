from django.contrib import admin

from backend.repairs.models import NodeFault, NodeRepairEvent, RepairMove


@admin.register(NodeRepairEvent)
class NodeRepairEventAdmin(admin.ModelAdmin):
    list_display = ["node", "from_state", "to_state", "actor_name", "rule", "created_at"]
    list_filter = ["to_state", "rule"]
    search_fields = ["node__name", "reason"]


@admin.register(NodeFault)
class NodeFaultAdmin(admin.ModelAdmin):
    list_display = ["node", "rule", "detail", "first_seen", "fired_at", "cleared_at", "outcome"]
    list_filter = ["rule", "severity"]
    search_fields = ["node__name", "rule"]


@admin.register(RepairMove)
class RepairMoveAdmin(admin.ModelAdmin):
    list_display = ["job", "node", "fault", "moved_at", "restarted_on"]
