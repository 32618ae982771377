from django.contrib import admin

from backend.accounts.models import (
    AllowedIp,
    AllowedIpEvent,
    ApiToken,
    SshKey,
    SshSessionEvent,
    UnixAccount,
)


@admin.register(UnixAccount)
class UnixAccountAdmin(admin.ModelAdmin):
    """Which Unix account each user's jobs run as (checked by UnixAccount.clean)."""

    list_display = ["user", "unix_name", "uid", "gid", "provisioned", "created_at"]
    readonly_fields = ["provisioned", "created_at"]
    search_fields = ["user__username", "unix_name", "uid"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "prefix", "created_at", "last_used_at"]
    readonly_fields = ["prefix", "digest"]
    search_fields = ["user__username", "name"]


@admin.register(SshKey)
class SshKeyAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "key_type", "bits", "fingerprint", "created_at"]
    search_fields = ["user__username", "fingerprint"]


@admin.register(AllowedIp)
class AllowedIpAdmin(admin.ModelAdmin):
    list_display = ["user", "network", "expires_at", "created_at"]
    search_fields = ["user__username", "network"]


@admin.register(AllowedIpEvent)
class AllowedIpEventAdmin(admin.ModelAdmin):
    list_display = ["user", "network", "kind", "at"]
    list_filter = ["kind"]
    search_fields = ["user__username", "network"]


@admin.register(SshSessionEvent)
class SshSessionEventAdmin(admin.ModelAdmin):
    """Connections to the SSH gateway: let in, refused (and why), closed with their job."""

    list_display = ["at", "login", "user", "address", "outcome", "message"]
    list_filter = ["outcome"]
    search_fields = ["login", "user__username", "job_id", "address"]
    readonly_fields = ["at", "login", "user", "job_id", "address", "outcome", "message"]
