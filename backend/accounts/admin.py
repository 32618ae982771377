"""Accounts in the Django admin, written through the account actions: Unix accounts set
and removed, SSH keys and allowed networks added (checked as the API checks them) and
removed, API tokens revoked; the event logs are shown only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.forms import ModelForm
from django.http import HttpRequest

from backend.accounts import actions
from backend.accounts.models import (
    AllowedIp,
    AllowedIpEvent,
    ApiToken,
    SshKey,
    SshSessionEvent,
    UnixAccount,
)
from backend.core.admin import ActionAdmin, ReadOnlyAdmin
from backend.core.exceptions import ActionRefused


@admin.register(UnixAccount)
class UnixAccountAdmin(ActionAdmin):
    """Which Unix account each user's jobs run as (checked by UnixAccount.clean)."""

    list_display = ["user", "unix_name", "uid", "gid", "provisioned", "created_at"]
    search_fields = ["user__username", "unix_name", "uid"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["provisioned", "created_at"] + ([] if obj is None else ["user"])

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> UnixAccount:
        return actions.set_unix_account(
            fields["user"], fields["uid"], fields["gid"], fields["unix_name"]
        )

    def update(
        self, request: HttpRequest, obj: UnixAccount, changes: dict[str, Any]
    ) -> UnixAccount:
        current: dict[str, Any] = {"uid": obj.uid, "gid": obj.gid, "unix_name": obj.unix_name}
        return actions.set_unix_account(obj.user, **(current | changes))

    def delete(self, request: HttpRequest, obj: UnixAccount) -> None:
        actions.remove_unix_account(obj.user)


@admin.register(ApiToken)
class ApiTokenAdmin(ActionAdmin):
    """Tokens are made by their owners (their plaintext is shown once, to them); a
    cluster admin may revoke one."""

    list_display = ["user", "name", "prefix", "created_at", "last_used_at"]
    search_fields = ["user__username", "name"]

    def delete(self, request: HttpRequest, obj: ApiToken) -> None:
        actions.revoke_api_token(obj)


@admin.register(SshKey)
class SshKeyAdmin(ActionAdmin):
    list_display = ["user", "name", "key_type", "bits", "fingerprint", "created_at"]
    search_fields = ["user__username", "fingerprint"]
    readonly_fields = ["key_type", "bits", "fingerprint", "created_at"]

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> SshKey:
        try:
            return actions.add_ssh_key(fields["user"], fields["public_key"], fields["name"])
        except ValueError as error:  # a bad key, or one someone has: as the API says it
            raise ActionRefused(str(error)) from None

    def delete(self, request: HttpRequest, obj: SshKey) -> None:
        actions.remove_ssh_key(obj)


@admin.register(AllowedIp)
class AllowedIpAdmin(ActionAdmin):
    """Networks allowed to reach a user's jobs; adding one the user has renews it."""

    list_display = ["user", "network", "expires_at", "created_at"]
    search_fields = ["user__username", "network"]
    readonly_fields = ["created_at"]

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> AllowedIp:
        try:
            return actions.add_allowed_ip(
                fields["user"], fields["network"], fields["description"], fields["expires_at"]
            )
        except ValueError as error:
            raise ActionRefused(str(error)) from None

    def delete(self, request: HttpRequest, obj: AllowedIp) -> None:
        actions.remove_allowed_ip(obj)


@admin.register(AllowedIpEvent)
class AllowedIpEventAdmin(ReadOnlyAdmin):
    list_display = ["user", "network", "kind", "at"]
    list_filter = ["kind"]
    search_fields = ["user__username", "network"]


@admin.register(SshSessionEvent)
class SshSessionEventAdmin(ReadOnlyAdmin):
    """Connections to the SSH gateway: let in, refused (and why), closed with their job."""

    list_display = ["at", "login", "user", "address", "outcome", "message"]
    list_filter = ["outcome"]
    search_fields = ["login", "user__username", "job_id", "address"]


admin.site.unregister(User)


@admin.register(User)
class TrainyardUserAdmin(UserAdmin):
    """Django's user admin (names, passwords, permissions), but a user is locked out by
    ``deactivate_user``, which also stops their tokens, and never deleted: their jobs and
    events stay on record."""

    def save_model(self, request: HttpRequest, obj: User, form: ModelForm, change: bool) -> None:
        deactivated = change and "is_active" in form.changed_data and not obj.is_active
        super().save_model(request, obj, form, change)
        if deactivated:
            actions.deactivate_user(obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
