"""Storage over REST. Everyone signed in sees the roots, scans and expiry runs (totals);
usage, largest paths and the expiry report are scoped by owner: people see their own,
VC admins their VCs', cluster admins all. Usage exports as CSV."""

from __future__ import annotations

from collections.abc import Callable

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from kombu.exceptions import OperationalError
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from backend.core.permissions import IsClusterAdminOrReadOnly
from backend.core.scoping import TenantScopedViewSet
from backend.core.spreadsheets import csv_response
from backend.storage import actions
from backend.storage.api.filters import (
    ExpiringFileFilter,
    ExpiryRunFilter,
    LargestPathFilter,
    ScanFilter,
    StorageRootFilter,
    UsageFilter,
)
from backend.storage.api.serializers import (
    ExpiringFileSerializer,
    ExpiryRunSerializer,
    LargestPathSerializer,
    QueuedSerializer,
    ScanSerializer,
    StorageRootSerializer,
    UsageSerializer,
)
from backend.storage.models import (
    ExpiringFile,
    ExpiryRun,
    LargestPath,
    RunStatus,
    Scan,
    StorageRoot,
    Usage,
)


class StorageRootViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Storage roots: anyone signed in reads; cluster admins configure them."""

    queryset = StorageRoot.objects.all()
    serializer_class = StorageRootSerializer
    lookup_field = "name"
    filterset_class = StorageRootFilter
    pagination_class = None
    permission_classes = [
        IsAuthenticated,
        IsClusterAdminOrReadOnly.saying("Only cluster admins can change storage roots."),
    ]

    def perform_create(self, serializer: BaseSerializer[StorageRoot]) -> None:
        serializer.instance = actions.create_storage_root(**serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer[StorageRoot]) -> None:
        assert serializer.instance is not None  # an update has its object
        serializer.instance = actions.update_storage_root(
            serializer.instance, serializer.validated_data
        )

    def perform_destroy(self, instance: StorageRoot) -> None:
        actions.delete_storage_root(instance)

    @extend_schema(request=None, responses={202: QueuedSerializer})
    @action(detail=True, methods=["post"])
    def scan(self, request: Request, name: str) -> Response:
        """Scan the root now (in the background); follow it in /storage/scans/."""
        root = self.get_object()
        _queue(actions.request_scan, root)
        return Response({"detail": f"Scan of {root.name} queued."}, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: QueuedSerializer})
    @action(detail=True, methods=["post"], url_path="expiry-dry-run")
    def expiry_dry_run(self, request: Request, name: str) -> Response:
        """List what the expiry policy would delete now, deleting nothing; the report is
        in /storage/expiring-files/."""
        root = self.get_object()
        if root.expiry_days is None:
            return Response(
                {"expiry_days": ["This root has no expiry policy."]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        _queue(actions.request_expiry_dry_run, root)
        return Response(
            {"detail": f"Expiry dry run of {root.name} queued."}, status=status.HTTP_202_ACCEPTED
        )


class ServiceUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The task queue cannot be reached; try again."


def _queue(request_work: Callable[[StorageRoot], None], root: StorageRoot) -> None:
    """Ask for background work on the root, or answer 503 when the broker cannot be
    reached (the request commits nothing, so the work is queued at once)."""
    try:
        request_work(root)
    except OperationalError as error:
        raise ServiceUnavailable(f"Could not queue the work ({error}); try again.") from error


class ScanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Scans, newest first, with their progress while they run."""

    queryset = Scan.objects.all()
    serializer_class = ScanSerializer
    filterset_class = ScanFilter

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        return queryset.select_related("root")


class ExpiryRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Expiry passes (dry runs and deletions) with their totals."""

    queryset = ExpiryRun.objects.all()
    serializer_class = ExpiryRunSerializer
    filterset_class = ExpiryRunFilter

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        return queryset.select_related("root")


class SnapshotRowsViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """Rows of the newest finished scan of each root (or of ``?scan=``)."""

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        if "scan" not in self.request.query_params:
            queryset = queryset.filter(scan_id__in=actions.latest_scans())
        return queryset.select_related("scan__root", "user", "vc")


class UsageViewSet(SnapshotRowsViewSet):
    """Usage by user, VC, user within a VC, and top-level directory, with its snapshot
    time."""

    queryset = Usage.objects.all()
    serializer_class = UsageSerializer
    filterset_class = UsageFilter
    ordering_fields = ["bytes", "files", "key"]
    ordering = ["-bytes", "key"]

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR})
    @action(detail=False, methods=["get"], pagination_class=None)
    def export(self, request: Request) -> HttpResponse:
        """The same rows (same filters) as a CSV file."""
        rows = self.filter_queryset(self.get_queryset())
        header = ["root", "snapshot_at", "kind", "key", "user", "vc", "bytes",
                  "apparent_bytes", "files"]  # fmt: skip
        return csv_response(UsageSerializer(rows, many=True).data, header, "storage-usage.csv")


class LargestPathViewSet(SnapshotRowsViewSet):
    """The largest files of each root's newest scan."""

    queryset = LargestPath.objects.all()
    serializer_class = LargestPathSerializer
    filterset_class = LargestPathFilter
    ordering = ["-bytes"]


class ExpiringFileViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """The expiry dry-run report: files that would be deleted now (``expired``) or within
    the warning days, from each root's newest dry run."""

    queryset = ExpiringFile.objects.all()
    serializer_class = ExpiringFileSerializer
    filterset_class = ExpiringFileFilter
    ordering = ["expires_at", "path"]

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        if "run" not in self.request.query_params:
            newest: dict[int, int] = {}
            for run_id, root_id in (
                ExpiryRun.objects.filter(dry_run=True, status=RunStatus.DONE)
                .order_by("root_id", "-started_at", "-id")
                .values_list("id", "root_id")
            ):
                newest.setdefault(root_id, run_id)
            queryset = queryset.filter(run_id__in=newest.values())
        return queryset.select_related("run__root", "user", "vc")
