"""Storage in the Django admin: roots, storage accounts and Lustre pools written through
the storage actions; scans and expiry runs are the storage manager's, shown only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from backend.core.admin import ActionAdmin, ReadOnlyAdmin, run_each
from backend.storage import actions
from backend.storage.models import (
    ExpiryRun,
    LustrePool,
    Scan,
    StorageAccount,
    StorageRoot,
)


@admin.register(StorageRoot)
class StorageRootAdmin(ActionAdmin):
    list_display = ["name", "path", "kind", "expiry_days", "scan_interval_minutes", "alerted_at"]
    readonly_fields = ["alerted_at", "created_at"]
    actions = ["scan_now", "expiry_dry_run"]

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> StorageRoot:
        return actions.create_storage_root(**fields)

    def update(
        self, request: HttpRequest, obj: StorageRoot, changes: dict[str, Any]
    ) -> StorageRoot:
        return actions.update_storage_root(obj, changes)

    def delete(self, request: HttpRequest, obj: StorageRoot) -> None:
        actions.delete_storage_root(obj)

    @admin.action(description="Scan the selected roots now")
    def scan_now(self, request: HttpRequest, queryset: QuerySet[StorageRoot]) -> None:
        run_each(self, request, queryset, actions.request_scan, "queued a scan of")

    @admin.action(description="List what the selected roots' expiry would delete now")
    def expiry_dry_run(self, request: HttpRequest, queryset: QuerySet[StorageRoot]) -> None:
        run_each(
            self, request, queryset, actions.request_expiry_dry_run, "queued an expiry dry run of"
        )


@admin.register(StorageAccount)
class StorageAccountAdmin(ActionAdmin):
    list_display = ["user", "uid"]
    search_fields = ["user__username", "uid"]

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> StorageAccount:
        return actions.create_storage_account(fields["user"], fields["uid"])

    def update(
        self, request: HttpRequest, obj: StorageAccount, changes: dict[str, Any]
    ) -> StorageAccount:
        return actions.update_storage_account(obj, changes)

    def delete(self, request: HttpRequest, obj: StorageAccount) -> None:
        actions.remove_storage_account(obj)


@admin.register(LustrePool)
class LustrePoolAdmin(ActionAdmin):
    list_display = ["root", "name", "vc", "osts"]

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> LustrePool:
        return actions.create_lustre_pool(**fields)

    def update(self, request: HttpRequest, obj: LustrePool, changes: dict[str, Any]) -> LustrePool:
        return actions.update_lustre_pool(obj, changes)

    def delete(self, request: HttpRequest, obj: LustrePool) -> None:
        actions.remove_lustre_pool(obj)


@admin.register(Scan)
class ScanAdmin(ReadOnlyAdmin):
    list_display = ["root", "status", "started_at", "finished_at", "files_seen", "bytes_seen"]
    list_filter = ["status", "root"]


@admin.register(ExpiryRun)
class ExpiryRunAdmin(ReadOnlyAdmin):
    list_display = ["root", "dry_run", "status", "started_at", "expired_files", "deleted_files"]
    list_filter = ["dry_run", "status", "root"]
