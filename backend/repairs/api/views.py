"""Node repair state, its history and the faults seen, for the dashboard; moves by hand."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from backend.clusters.models import Node
from backend.core.permissions import IsClusterAdmin
from backend.core.scoping import TenantScopedViewSet
from backend.repairs import actions
from backend.repairs.api.filters import NodeFaultFilter, NodeRepairFilter
from backend.repairs.api.serializers import (
    NodeFaultSerializer,
    NodeMoveSerializer,
    NodeRepairDetailSerializer,
    NodeRepairSerializer,
)
from backend.repairs.models import NodeFault, NodeRepairEvent
from repairmanager.states import MoveRefused


class NodeRepairViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Every node's repair state and open faults; a node's detail adds its history."""

    queryset = Node.objects.all()
    lookup_field = "name"
    filterset_class = NodeRepairFilter
    ordering = ["name"]
    action_permissions = {
        "move": (IsClusterAdmin.saying("Only cluster admins move nodes through repair."),),
    }

    def refine_queryset(self, queryset):
        queryset = queryset.prefetch_related("faults")
        if self.action != "list":
            events = NodeRepairEvent.objects.order_by("created_at", "id")
            queryset = queryset.prefetch_related(Prefetch("repair_events", queryset=events))
        return queryset

    def get_serializer_class(self):
        return NodeRepairSerializer if self.action == "list" else NodeRepairDetailSerializer

    @extend_schema(request=NodeMoveSerializer, responses=NodeRepairDetailSerializer)
    @action(detail=True, methods=["post"])
    def move(self, request: Request, name: str) -> Response:
        """Move the node one step through the repair cycle by hand (cluster admins)."""
        node = self.get_object()
        serializer = NodeMoveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        to_state = serializer.validated_data["to_state"]
        reason = serializer.validated_data.get("reason") or f"moved to {to_state} by hand"
        actor = request.user if request.user.is_authenticated else None
        try:
            # The answer is the node as this move left it: the repair cycle it sets off
            # (validation after a repair, say) waits for the commit, so cannot overtake it.
            with transaction.atomic():
                actions.move_node(node, to_state, reason, actor=actor)
                moved = NodeRepairDetailSerializer(self.get_queryset().get(pk=node.pk)).data
        except MoveRefused as refused:
            raise ValidationError({"to_state": [str(refused)]}) from None
        return Response(moved)


class NodeFaultViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """Faults the repair manager has seen, newest first, with what it did about each."""

    queryset = NodeFault.objects.all()
    serializer_class = NodeFaultSerializer
    filterset_class = NodeFaultFilter

    def refine_queryset(self, queryset):
        return queryset.select_related("node")
