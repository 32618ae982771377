"""Query-string filters of the storage API."""

import django_filters

from backend.core.filters import IdFilter
from backend.storage.models import (
    ExpiringFile,
    ExpiryRun,
    LargestPath,
    Scan,
    StorageRoot,
    Usage,
    UsageKind,
)


class StorageRootFilter(django_filters.FilterSet):
    class Meta:
        model = StorageRoot
        fields = ["kind"]


class ScanFilter(django_filters.FilterSet):
    class Meta:
        model = Scan
        fields = {"root__name": ["exact"], "status": ["exact"]}


class ExpiryRunFilter(django_filters.FilterSet):
    class Meta:
        model = ExpiryRun
        fields = {"root__name": ["exact"], "dry_run": ["exact"]}


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
