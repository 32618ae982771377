from __future__ import annotations

from rest_framework import serializers

from backend.clusters.models import Node, RepairState
from backend.repairs.models import NodeFault, NodeRepairEvent


class NodeRepairEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)

    class Meta:
        model = NodeRepairEvent
        fields = ["from_state", "to_state", "reason", "rule", "actor", "created_at"]


class NodeFaultSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    open = serializers.SerializerMethodField()

    class Meta:
        model = NodeFault
        fields = [
            "id", "node", "rule", "fault", "detail", "severity", "action", "first_seen",
            "fired_at", "cleared_at", "open", "outcome",
        ]  # fmt: skip

    def get_open(self, fault: NodeFault) -> bool:
        return fault.cleared_at is None


class NodeRepairSerializer(serializers.ModelSerializer):
    """A node's place in the repair cycle, with the faults open on it."""

    open_faults = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "repair_state", "schedulable", "ready", "ready_reason", "open_faults"]

    def get_open_faults(self, node: Node) -> list[dict]:
        faults = [fault for fault in node.faults.all() if fault.cleared_at is None]
        return NodeFaultSerializer(faults, many=True).data


class NodeRepairDetailSerializer(NodeRepairSerializer):
    history = NodeRepairEventSerializer(source="repair_events", many=True, read_only=True)

    class Meta(NodeRepairSerializer.Meta):
        fields = [*NodeRepairSerializer.Meta.fields, "history"]


class NodeMoveSerializer(serializers.Serializer):
    to_state = serializers.ChoiceField(choices=RepairState.choices)
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True)
