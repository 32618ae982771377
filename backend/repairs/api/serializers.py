from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from backend.clusters.models import Node, RepairState
from backend.repairs.manager import HELD_BACK
from backend.repairs.models import NodeFault, NodeRepairEvent
from repairmanager.states import NEXT_STATES


class NodeRepairEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)

    class Meta:
        model = NodeRepairEvent
        fields = ["from_state", "to_state", "reason", "rule", "actor", "created_at"]


class NodeFaultSerializer(serializers.ModelSerializer):
    node: serializers.SlugRelatedField[Node] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    open = serializers.SerializerMethodField()
    held_back = serializers.SerializerMethodField(
        help_text="Open, and the safety valve keeps its node in service (see outcome)."
    )

    class Meta:
        model = NodeFault
        fields = [
            "id", "node", "rule", "fault", "detail", "severity", "action", "first_seen",
            "fired_at", "cleared_at", "open", "held_back", "outcome",
        ]  # fmt: skip

    def get_open(self, fault: NodeFault) -> bool:
        return fault.cleared_at is None

    def get_held_back(self, fault: NodeFault) -> bool:
        return fault.cleared_at is None and fault.outcome.startswith(HELD_BACK)


class NodeRepairSerializer(serializers.ModelSerializer):
    """A node's place in the repair cycle, with the faults open on it."""

    open_faults = serializers.SerializerMethodField()
    next_states = serializers.SerializerMethodField(
        help_text="Where a manual move may take the node from its state."
    )

    class Meta:
        model = Node
        fields = [
            "name", "repair_state", "next_states", "schedulable", "ready", "ready_reason",
            "open_faults",
        ]  # fmt: skip

    def get_next_states(self, node: Node) -> list[str]:
        return sorted(NEXT_STATES[RepairState(node.repair_state)])

    @extend_schema_field(NodeFaultSerializer(many=True))
    def get_open_faults(self, node: Node) -> list[dict]:
        faults = [fault for fault in node.faults.all() if fault.cleared_at is None]
        return list(NodeFaultSerializer(faults, many=True).data)


class NodeRepairDetailSerializer(NodeRepairSerializer):
    history = NodeRepairEventSerializer(source="repair_events", many=True, read_only=True)

    class Meta(NodeRepairSerializer.Meta):
        fields = [*NodeRepairSerializer.Meta.fields, "history"]


class NodeMoveSerializer(serializers.Serializer):
    to_state = serializers.ChoiceField(choices=RepairState.choices)
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True)
