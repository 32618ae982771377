from django.contrib import admin

from backend.storage.models import (
    ExpiryRun,
    LustrePool,
    Scan,
    StorageAccount,
    StorageRoot,
)


@admin.register(StorageRoot)
class StorageRootAdmin(admin.ModelAdmin):
    list_display = ["name", "path", "kind", "expiry_days", "scan_interval_minutes", "alerted_at"]


@admin.register(StorageAccount)
class StorageAccountAdmin(admin.ModelAdmin):
    list_display = ["user", "uid"]
    search_fields = ["user__username", "uid"]


@admin.register(LustrePool)
class LustrePoolAdmin(admin.ModelAdmin):
    list_display = ["root", "name", "vc", "osts"]


@admin.register(Scan)
class ScanAdmin(admin.ModelAdmin):
    list_display = ["root", "status", "started_at", "finished_at", "files_seen", "bytes_seen"]
    list_filter = ["status", "root"]


@admin.register(ExpiryRun)
class ExpiryRunAdmin(admin.ModelAdmin):
    list_display = ["root", "dry_run", "status", "started_at", "expired_files", "deleted_files"]
    list_filter = ["dry_run", "status", "root"]
