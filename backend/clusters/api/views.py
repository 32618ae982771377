"""The cluster's inventory over REST: GPU types and nodes (the cluster's summary and use
by VC are the jobs API's, backend/jobs/api/cluster.py)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from backend.clusters import actions
from backend.clusters.api.filters import NodeFilter
from backend.clusters.api.serializers import (
    GpuTypeSerializer,
    NodeSerializer,
    NodeUpdateSerializer,
)
from backend.clusters.models import GpuType, Node
from backend.core.permissions import IsClusterAdminOrReadOnly, acting_user
from backend.core.scoping import TenantScopedViewSet


class ClusterInventoryViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    TenantScopedViewSet,
):
    """Part of the cluster's inventory: anyone signed in reads; only cluster admins write."""

    lookup_field = "name"
    permission_classes = [
        IsAuthenticated,
        IsClusterAdminOrReadOnly.saying("Only cluster admins can change the cluster."),
    ]


class GpuTypeViewSet(ClusterInventoryViewSet):
    """GPU types (SKUs) and their t-shirt sizes: CPU cores and memory per GPU."""

    queryset = GpuType.objects.all()
    serializer_class = GpuTypeSerializer
    pagination_class = None
    filterset_class = None

    def perform_create(self, serializer: BaseSerializer[GpuType]) -> None:
        serializer.instance = actions.create_gpu_type(**serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer[GpuType]) -> None:
        gpu_type = serializer.instance
        assert gpu_type is not None  # an update's serializer holds the object found
        serializer.instance = actions.update_gpu_type(gpu_type, serializer.validated_data)


class NodeViewSet(mixins.DestroyModelMixin, ClusterInventoryViewSet):
    """Worker nodes: registered, labelled, cordoned and removed by cluster admins."""

    queryset = Node.objects.all()
    serializer_class = NodeSerializer
    filterset_class = NodeFilter
    ordering = ["name"]

    def refine_queryset(self, queryset):
        return queryset.select_related("gpu_type")

    def get_serializer_class(self):
        if self.action in ("update", "partial_update"):
            return NodeUpdateSerializer
        return NodeSerializer

    def perform_create(self, serializer: BaseSerializer[Node]) -> None:
        serializer.instance = actions.register_node(**serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer[Node]) -> None:
        node = serializer.instance
        assert node is not None  # an update's serializer holds the object found
        serializer.instance = actions.update_node(node, serializer.validated_data)

    @extend_schema(responses={204: None, 202: NodeSerializer})
    def destroy(self, request: Request, name: str) -> Response:
        """Remove the node: at once when no job runs there (204); else it is cordoned and
        drained (202), and goes once its jobs have ended (moved to other nodes after the
        drain deadline). 409 where the cluster backend reports its own nodes."""
        node = self.get_object()
        if actions.remove_node(node, acting_user(request)):
            return Response(status=status.HTTP_204_NO_CONTENT)
        node.refresh_from_db()
        data = NodeSerializer(node, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, name: str) -> Response:
        """Stop placing new work on the node; running jobs stay."""
        node = actions.cordon_node(self.get_object())
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, name: str) -> Response:
        """Let the node take new work again."""
        node = actions.uncordon_node(self.get_object())
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)
