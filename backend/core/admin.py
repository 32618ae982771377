"""The Django admin's two shapes: every admin either writes through its app's actions
(``ActionAdmin``) or only shows (``ReadOnlyAdmin``), so that nothing the admin does skips
an action's checks, events or triggers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db import models
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from backend.core.exceptions import ActionRefused
from backend.core.models import OutgoingEmail


class ChangesNothing:
    """No add, change or delete permission: for what has no action for the admin to call."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(ChangesNothing, admin.ModelAdmin):
    """Shows the model and changes nothing: it has no action for the admin to call."""


class ReadOnlyInline(ChangesNothing, admin.TabularInline):
    """An inline that shows its rows and changes none."""

    extra = 0


class ActionAdmin(admin.ModelAdmin):
    """Writes only through the app's actions: a subclass overrides ``create``, ``update``
    and ``delete`` with calls to them; what it leaves out, the admin may not do. An action
    that refuses (ActionRefused) changes nothing and its reason is shown as an error."""

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> models.Model:
        """Add an object with the form's ``fields``, through an action."""
        raise NotImplementedError

    def update(self, request: HttpRequest, obj: Any, changes: dict[str, Any]) -> models.Model:
        """Change ``obj``'s fields named in ``changes``, through an action."""
        raise NotImplementedError

    def delete(self, request: HttpRequest, obj: Any) -> None:
        """Remove ``obj``, through an action."""
        raise NotImplementedError

    def _defines(self, name: str) -> bool:
        return getattr(type(self), name) is not getattr(ActionAdmin, name)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._defines("create") and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._defines("update") and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._defines("delete") and super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:
        if change:
            changes = {
                name: form.cleaned_data[name]
                for name in form.changed_data
                if name in form.cleaned_data
            }
            if changes:
                self.update(request, obj, changes)
            return
        saved = self.create(request, dict(form.cleaned_data))
        obj.__dict__.update(saved.__dict__)  # the admin logs and redirects to ``obj``

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.delete(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        for obj in queryset:
            self.delete(request, obj)

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _refusal_shown(self, request, super().changeform_view, *args, **kwargs)

    def delete_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _refusal_shown(self, request, super().delete_view, *args, **kwargs)

    def changelist_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _refusal_shown(self, request, super().changelist_view, *args, **kwargs)


def _refusal_shown(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    view: Callable[..., HttpResponse],
    *args: Any,
    **kwargs: Any,
) -> HttpResponse:
    """The view's answer; where an action refused (the view's transaction rolled back),
    the same page again with the refusal as an error message."""
    try:
        return view(request, *args, **kwargs)
    except ActionRefused as refusal:
        model_admin.message_user(request, str(refusal), messages.ERROR)
        return HttpResponseRedirect(request.get_full_path())


def admin_user(request: HttpRequest) -> User:
    """The signed-in staff user an admin page acts for."""
    user = request.user
    assert isinstance(user, User), "the admin lets only signed-in staff in"
    return user


def run_each(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: models.QuerySet,
    action: Callable[[Any], object],
    done: str,
) -> None:
    """An admin action: ``action`` on each selected object, each in its own transaction
    (as the API does it); says how many it did (``done``: a past participle) and each
    refusal with its reason."""
    succeeded = 0
    for obj in queryset:
        try:
            action(obj)
        except ActionRefused as refusal:
            model_admin.message_user(request, str(refusal), messages.ERROR)
        else:
            succeeded += 1
    if succeeded:
        noun = queryset.model._meta.verbose_name_plural if succeeded > 1 else ""
        noun = noun or queryset.model._meta.verbose_name
        model_admin.message_user(request, f"{done.capitalize()} {succeeded} {noun}.")


@admin.register(OutgoingEmail)
class OutgoingEmailAdmin(ReadOnlyAdmin):
    """The outbox: sent by the outbox's worker, never edited."""

    list_display = ["subject", "created_at", "sent_at", "attempts"]
