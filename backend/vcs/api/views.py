"""Virtual clusters over REST: mine, detail, settings, quotas, members. (A VC's jobs are
the jobs API's: its detail's resources and its queue and deadlines, backend/jobs/api/vc_jobs.py.)"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response

from backend.core.permissions import (
    IsClusterAdmin,
    IsClusterAdminOnceFoundOrReadOnly,
    IsVcAdmin,
    IsVcAdminOrReadOnly,
)
from backend.core.scoping import TenantScopedViewSet
from backend.vcs import actions
from backend.vcs.api.serializers import (
    MembershipChangeSerializer,
    MembershipSerializer,
    QuotaListSerializer,
    QuotaOutSerializer,
    VirtualClusterCreateSerializer,
    VirtualClusterDetailSerializer,
    VirtualClusterSerializer,
    VirtualClusterSettingsSerializer,
)
from backend.vcs.models import Membership, VirtualCluster

CHANGE_MEMBERS = "Only an admin of VC {vc} can change members."


class VirtualClusterViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    queryset = VirtualCluster.objects.all()
    serializer_class = VirtualClusterSerializer
    lookup_field = "name"
    filterset_class = None
    ordering = ["name"]
    action_permissions = {
        "create": (IsClusterAdmin.saying("Only cluster admins can create virtual clusters."),),
        "partial_update": (IsVcAdmin.saying("Only an admin of VC {vc} can change its settings."),),
        "quotas": (
            IsClusterAdminOnceFoundOrReadOnly.saying("Only cluster admins can set quotas."),
        ),
        "members": (IsVcAdminOrReadOnly.saying(CHANGE_MEMBERS),),
        "remove_member": (IsVcAdmin.saying(CHANGE_MEMBERS),),
    }

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        user = self.request.user
        if user.is_authenticated:
            context["roles"] = dict(
                Membership.objects.filter(user=user).values_list("vc_id", "role")
            )
        return context

    @extend_schema(
        request=VirtualClusterCreateSerializer, responses={201: VirtualClusterDetailSerializer}
    )
    def create(self, request: Request) -> Response:
        """Create a VC (cluster admins)."""
        body = VirtualClusterCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        vc = actions.create_vc(**body.validated_data)
        return Response(self._detail(vc), status=status.HTTP_201_CREATED)

    @extend_schema(responses=VirtualClusterDetailSerializer)
    def retrieve(self, request: Request, name: str) -> Response:
        """A VC's settings and, per GPU type, its quota, use, queued demand and free share."""
        return Response(self._detail(self.get_object()))

    @extend_schema(
        request=VirtualClusterSettingsSerializer, responses=VirtualClusterDetailSerializer
    )
    def partial_update(self, request: Request, name: str) -> Response:
        """Change the VC's settings (VC admins)."""
        vc = self.get_object()
        body = VirtualClusterSettingsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        vc = actions.update_vc_settings(vc, dict(body.validated_data))
        return Response(self._detail(vc))

    def _detail(self, vc: VirtualCluster) -> dict[str, Any]:
        return VirtualClusterDetailSerializer(vc, context=self.get_serializer_context()).data

    @extend_schema(
        methods=["PUT"], request=QuotaListSerializer, responses=QuotaOutSerializer(many=True)
    )
    @extend_schema(methods=["GET"], responses=QuotaOutSerializer(many=True))
    @action(detail=True, methods=["get", "put"], pagination_class=None)
    def quotas(self, request: Request, name: str) -> Response:
        """The VC's quotas per GPU type; PUT replaces them all (cluster admins)."""
        vc = self.get_object()
        if request.method == "PUT":
            if not isinstance(request.data, list):
                raise ValidationError(
                    {"detail": 'Send a list such as [{"gpu_type": "A100", "gpus": 8}].'}
                )
            body = QuotaListSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            actions.set_vc_quotas(vc, [_spec(item) for item in body.validated_data])
        quotas = vc.quotas.select_related("gpu_type").order_by("gpu_type__name")
        return Response(QuotaOutSerializer(quotas, many=True).data)

    @extend_schema(methods=["GET"], responses=MembershipSerializer(many=True))
    @extend_schema(
        methods=["POST"], request=MembershipChangeSerializer, responses=MembershipSerializer
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def members(self, request: Request, name: str) -> Response:
        """The VC's members and roles; POST adds one or changes their role (VC admins)."""
        vc = self.get_object()
        if request.method == "POST":
            body = MembershipChangeSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            membership = actions.set_membership(
                vc, body.validated_data["username"], body.validated_data["role"]
            )
            return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)
        memberships = vc.memberships.select_related("user").order_by("user__username")
        return Response(MembershipSerializer(memberships, many=True).data)

    @extend_schema(request=None, responses={204: None})
    @action(
        detail=True,
        methods=["delete"],
        url_path=r"members/(?P<username>[\w.@+-]+)",
        pagination_class=None,
    )
    def remove_member(self, request: Request, name: str, username: str) -> Response:
        """Remove a member from the VC (VC admins). Their jobs stay."""
        vc = self.get_object()
        membership = get_object_or_404(vc.memberships, user__username=username)
        actions.remove_membership(vc, membership.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _spec(item: dict) -> actions.QuotaSpec:
    return actions.QuotaSpec(item["gpu_type"], item["gpus"], item.get("cpus"), item.get("memory"))
