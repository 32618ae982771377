"""A user's own credentials (/me/...) and, for cluster admins, the users (/users/)."""

from __future__ import annotations

from django.contrib.auth import authenticate, login, logout
from django.contrib.auth.models import User
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action, api_view, permission_classes
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from backend.accounts import actions
from backend.accounts.api.filters import AllowedIpEventFilter, UserFilter
from backend.accounts.api.serializers import (
    AllowedIpEventSerializer,
    AllowedIpSerializer,
    ApiTokenSerializer,
    LoginSerializer,
    MeSerializer,
    NewApiTokenSerializer,
    SessionSerializer,
    SshKeySerializer,
    UnixAccountSerializer,
    UserSerializer,
)
from backend.accounts.models import AllowedIp, AllowedIpEvent, ApiToken, SshKey, UnixAccount
from backend.accounts.unix import tenancy
from backend.core.permissions import IsClusterAdmin, acting_user
from backend.core.querysets import ClusterAdminOnlyQuerySet
from backend.core.scoping import TenantScopedViewSet


class OwnCredentialViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Credentials a user lists, adds and deletes for themselves alone."""

    filterset_class = None
    pagination_class = None


class ApiTokenViewSet(OwnCredentialViewSet):
    queryset = ApiToken.objects.all()
    serializer_class = ApiTokenSerializer

    @extend_schema(responses={201: NewApiTokenSerializer})
    def create(self, request: Request) -> Response:
        """Create a token. The answer is the only time its secret is shown."""
        body = ApiTokenSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        token, plaintext = actions.create_api_token(
            acting_user(request), body.validated_data["name"]
        )
        created = {**NewApiTokenSerializer(token).data, "token": plaintext}
        return Response(created, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        actions.revoke_api_token(instance)


class SshKeyViewSet(OwnCredentialViewSet):
    """The user's global SSH public keys, installed in the jobs they start."""

    queryset = SshKey.objects.all()
    serializer_class = SshKeySerializer

    def perform_create(self, serializer: BaseSerializer[SshKey]) -> None:
        data = serializer.validated_data
        try:
            serializer.instance = actions.add_ssh_key(
                acting_user(self.request), data["public_key"], data.get("name", "")
            )
        except ValueError as error:
            raise serializers.ValidationError({"public_key": [str(error)]}) from error

    def perform_destroy(self, instance: SshKey) -> None:
        actions.remove_ssh_key(instance)


class AllowedIpViewSet(OwnCredentialViewSet):
    """Networks the user may reach their jobs' endpoints from, each until it expires."""

    queryset = AllowedIp.objects.all()
    serializer_class = AllowedIpSerializer

    def perform_create(self, serializer: BaseSerializer[AllowedIp]) -> None:
        data = serializer.validated_data
        try:
            serializer.instance = actions.add_allowed_ip(
                acting_user(self.request),
                data["address"],
                description=data.get("description", ""),
                expires_at=data.get("expires_at"),
            )
        except ValueError as error:
            # The address was checked by the serializer; what is left is about the expiry.
            raise serializers.ValidationError({"expires_at": [str(error)]}) from error

    def perform_destroy(self, instance: AllowedIp) -> None:
        actions.remove_allowed_ip(instance)


class AllowedIpEventViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """What happened to the user's allowed networks: added, renewed, expired, removed."""

    queryset = AllowedIpEvent.objects.all()
    serializer_class = AllowedIpEventSerializer
    filterset_class = AllowedIpEventFilter


class UserViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TenantScopedViewSet
):
    """Users, managed by cluster admins."""

    queryset: QuerySet[User] = (
        ClusterAdminOnlyQuerySet(User).select_related("unix_account").order_by("username")
    )
    serializer_class = UserSerializer
    permission_classes = [IsAuthenticated, IsClusterAdmin]
    lookup_field = "username"
    lookup_value_regex = r"[\w.@+-]+"
    filterset_class = UserFilter

    def perform_create(self, serializer: BaseSerializer[User]) -> None:
        data = serializer.validated_data
        serializer.instance = actions.create_user(
            data["username"],
            data.get("email", ""),
            data.get("password"),
            data.get("is_staff", False),
        )

    @extend_schema(methods=["GET"], request=None, responses={200: UnixAccountSerializer, 404: None})
    @extend_schema(methods=["PUT"], request=UnixAccountSerializer, responses=UnixAccountSerializer)
    @extend_schema(methods=["DELETE"], request=None, responses={204: None})
    @action(detail=True, methods=["get", "put", "delete"], url_path="unix-account")
    def unix_account(self, request: Request, username: str) -> Response:
        """The Unix account the user's jobs run as: read it, set it (a uid of the minimum or
        more; where this host knows the name, its uid and gid), or forget it."""
        user = self.get_object()
        if request.method == "PUT":
            current = UnixAccount.objects.filter(user=user).first()
            body = UnixAccountSerializer(current, data=request.data)
            body.is_valid(raise_exception=True)
            stored = actions.set_unix_account(user, **body.validated_data)
            return Response(UnixAccountSerializer(stored).data)
        if request.method == "DELETE":
            actions.remove_unix_account(user)
            return Response(status=status.HTTP_204_NO_CONTENT)
        account = UnixAccount.objects.filter(user=user).first()
        if account is None:
            return Response(
                {"detail": f"{username} has no Unix account yet."}, status=status.HTTP_404_NOT_FOUND
            )
        return Response(UnixAccountSerializer(account).data)

    @extend_schema(request=None, responses=UserSerializer)
    @action(detail=True, methods=["post"])
    def deactivate(self, request: Request, username: str) -> Response:
        """Lock the user out and revoke their tokens; their jobs stay on record."""
        user = self.get_object()
        actions.deactivate_user(user)
        return Response(UserSerializer(user).data)


@extend_schema(responses=MeSerializer)
@api_view(["GET"])
def me_view(request: Request) -> Response:
    """Who I am, whether I am a cluster admin, and my VCs with my role in each."""
    return Response(MeSerializer(request.user).data)


@extend_schema(request=LoginSerializer, responses=MeSerializer)
@api_view(["POST"])
@permission_classes([AllowAny])
def login_view(request: Request) -> Response:
    """Sign in with a username and password; the answer is who I am, the session a cookie."""
    body = LoginSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    user = authenticate(
        request._request,
        username=body.validated_data["username"],
        password=body.validated_data["password"],
    )
    if user is None:
        return Response(
            {"detail": "Wrong username or password, or the account is deactivated."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    login(request._request, user)
    return Response(MeSerializer(user).data)


@extend_schema(responses=SessionSerializer)
@api_view(["GET"])
@permission_classes([AllowAny])
def session_view(request: Request) -> Response:
    """Who is signed in on this session: ``{"me": ..., "tenancy": ...}`` (how tenants are kept
    apart, as the cluster summary says it), or ``{"me": null}`` (not a 401, so that a
    signed-out browser's first page load logs no error)."""
    user = request.user
    if not user.is_authenticated:
        return Response({"me": None})
    return Response({"me": MeSerializer(user).data, "tenancy": tenancy()})


@extend_schema(request=None, responses={204: None})
@api_view(["POST"])
@permission_classes([AllowAny])
def logout_view(request: Request) -> Response:
    """End the session (signing out twice is not an error)."""
    logout(request._request)
    return Response(status=status.HTTP_204_NO_CONTENT)
