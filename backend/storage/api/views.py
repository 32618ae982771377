"""Storage over REST. Everyone signed in sees the roots, scans and expiry runs (totals);
usage, largest paths and the expiry report are scoped by owner: people see their own,
VC admins their VCs', cluster admins all. Usage exports as CSV."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from kombu.exceptions import OperationalError
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from backend.core.filters import IdFilter
from backend.core.scoping import TenantScopedViewSet
from backend.core.spreadsheets import csv_response
from backend.storage import actions, tasks
from backend.storage.api.serializers import (
    ExpiringFileSerializer,
    ExpiryRunSerializer,
    LargestPathSerializer,
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
    UsageKind,
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
    filterset_fields = ["kind"]
    pagination_class = None

    def check_permissions(self, request: Request) -> None:
        super().check_permissions(request)
        if request.method not in ("GET", "HEAD", "OPTIONS") and not request.user.is_staff:
            raise PermissionDenied("Only cluster admins can change storage roots.")

    @extend_schema(request=None, responses={202: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def scan(self, request: Request, name: str) -> Response:
        """Scan the root now (in the background); follow it in /storage/scans/."""
        root = self.get_object()
        _queue(tasks.scan_root, root.pk)
        return Response({"detail": f"Scan of {root.name} queued."}, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: OpenApiTypes.OBJECT})
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
        _queue(tasks.expire_root, root.pk, dry_run=True)
        return Response(
            {"detail": f"Expiry dry run of {root.name} queued."}, status=status.HTTP_202_ACCEPTED
        )


class ServiceUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The task queue cannot be reached; try again."


def _queue(task, *args: object, **kwargs: object) -> None:
    """Queue a task, or answer 503 when the broker cannot be reached."""
    try:
        task.delay(*args, **kwargs)
    except OperationalError as error:
        raise ServiceUnavailable(f"Could not queue the work ({error}); try again.") from error


class ScanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Scans, newest first, with their progress while they run."""

    queryset = Scan.objects.all()
    serializer_class = ScanSerializer
    filterset_fields = {"root__name": ["exact"], "status": ["exact"]}

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        return queryset.select_related("root")


class ExpiryRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Expiry passes (dry runs and deletions) with their totals."""

    queryset = ExpiryRun.objects.all()
    serializer_class = ExpiryRunSerializer
    filterset_fields = {"root__name": ["exact"], "dry_run": ["exact"]}

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        return queryset.select_related("root")


class SnapshotFilter(django_filters.FilterSet):
    root = django_filters.CharFilter(field_name="scan__root__name")
    user = django_filters.CharFilter(field_name="user__username")
    vc = django_filters.CharFilter(field_name="vc__name")
    scan = IdFilter(
        field_name="scan_id", help_text="A past scan; by default the newest of each root."
    )


class UsageFilter(SnapshotFilter):
    kind = django_filters.ChoiceFilter(choices=UsageKind.choices)

    class Meta:
        model = Usage
        fields = ["root", "kind", "user", "vc", "scan"]


class LargestPathFilter(SnapshotFilter):
    class Meta:
        model = LargestPath
        fields = ["root", "user", "vc", "scan"]


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


class ExpiringFileFilter(django_filters.FilterSet):
    root = django_filters.CharFilter(field_name="run__root__name")
    user = django_filters.CharFilter(field_name="user__username")
    vc = django_filters.CharFilter(field_name="vc__name")
    run = IdFilter(
        field_name="run_id", help_text="A past run; by default each root's newest dry run."
    )

    class Meta:
        model = ExpiringFile
        fields = ["root", "user", "vc", "expired", "run"]


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
