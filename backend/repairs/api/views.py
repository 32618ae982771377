"""Node repair state, its history and the faults seen, for the dashboard; moves by hand."""

from __future__ import annotations

import django_filters
from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from backend.clusters.models import Node
from backend.core.scoping import TenantScopedViewSet
from backend.repairs import actions
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
    filterset_fields = ["repair_state"]
    ordering = ["name"]

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
        if not request.user.is_staff:
            raise PermissionDenied("Only cluster admins move nodes through repair.")
        node = self.get_object()
        serializer = NodeMoveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        to_state = serializer.validated_data["to_state"]
        reason = serializer.validated_data.get("reason") or f"moved to {to_state} by hand"
        try:
            actions.move_node(node, to_state, reason, actor=request.user)
        except MoveRefused as refused:
            raise ValidationError({"to_state": [str(refused)]}) from None
        return Response(NodeRepairDetailSerializer(self.get_queryset().get(pk=node.pk)).data)


class NodeFaultFilter(django_filters.FilterSet):
    open = django_filters.BooleanFilter(
        field_name="cleared_at", lookup_expr="isnull", label="Only faults that still hold."
    )
    node = django_filters.CharFilter(field_name="node__name")

    class Meta:
        model = NodeFault
        fields = ["open", "node", "rule", "severity"]


class NodeFaultViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """Faults the repair manager has seen, newest first, with what it did about each."""

    queryset = NodeFault.objects.all()
    serializer_class = NodeFaultSerializer
    filterset_class = NodeFaultFilter

    def refine_queryset(self, queryset):
        return queryset.select_related("node")
