"""Virtual clusters in the Django admin, written through the VC actions: settings by
``update_vc_settings``, the quotas as a whole by ``set_vc_quotas``, members one by one by
``set_membership`` / ``remove_membership``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.forms import BaseInlineFormSet, ModelForm
from django.http import HttpRequest

from backend.core.admin import ActionAdmin
from backend.vcs import actions
from backend.vcs.models import Membership, Quota, VirtualCluster


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at"]


@admin.register(VirtualCluster)
class VirtualClusterAdmin(ActionAdmin):
    list_display = ["name", "policy", "max_wall_time", "max_interactive_gpus", "user_gpu_limit"]
    search_fields = ["name"]
    inlines = [QuotaInline, MembershipInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["created_at"] if obj is None else ["name", "created_at"]

    def create(self, request: HttpRequest, fields: dict[str, Any]) -> VirtualCluster:
        return actions.create_vc(**fields)

    def update(
        self, request: HttpRequest, obj: VirtualCluster, changes: dict[str, Any]
    ) -> VirtualCluster:
        return actions.update_vc_settings(obj, changes)

    def save_formset(
        self, request: HttpRequest, form: ModelForm, formset: BaseInlineFormSet, change: bool
    ) -> None:
        vc = form.instance
        kept = [
            row for row in formset.forms if row.cleaned_data and not row.cleaned_data.get("DELETE")
        ]
        if formset.model is Quota:
            if formset.has_changed():
                actions.set_vc_quotas(vc, [
                    actions.QuotaSpec(row.cleaned_data["gpu_type"], row.cleaned_data["gpus"],
                                      row.cleaned_data["cpus"], row.cleaned_data["memory"])
                    for row in kept
                ])  # fmt: skip
        else:
            for row in formset.forms:
                if not row.has_changed() or not row.cleaned_data:
                    continue
                if row.instance.pk and ("user" in row.changed_data or row in formset.deleted_forms):
                    # ``row.instance`` holds the form's values: the stored row says who left.
                    actions.remove_membership(vc, Membership.objects.get(pk=row.instance.pk).user)
                if row in kept:
                    actions.set_membership(vc, row.cleaned_data["user"], row.cleaned_data["role"])
        # What the admin's history message reads (formset.save() would have set them).
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
