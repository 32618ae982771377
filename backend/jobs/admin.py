"""Jobs in the Django admin: shown, never written by hand. A status changes only through
the job actions (kill, pause, resume, approve: admin actions calling the functions the API
calls); priority, wall time and retries through ``change_job``, which records the change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from backend.core.admin import ActionAdmin, ReadOnlyInline, admin_user, run_each
from backend.jobs import actions
from backend.jobs.models import Job, JobAttempt, JobEvent

# What a cluster admin may change on a job in the admin (through ``change_job``).
CHANGEABLE = ("priority", "max_wall_time", "max_retries")


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["from_status", "to_status", "actor_name", "reason", "created_at"]


class JobAttemptInline(ReadOnlyInline):
    model = JobAttempt


@admin.register(Job)
class JobAdmin(ActionAdmin):
    list_display = [
        "job_id",
        "name",
        "owner",
        "vc",
        "status",
        "gpu_type",
        "workers",
        "submitted_at",
    ]
    list_filter = ["status", "type", "vc"]
    search_fields = ["job_id", "name", "owner__username"]
    list_select_related = ["owner", "vc", "gpu_type"]
    inlines = [JobAttemptInline, JobEventInline]
    actions = ["kill", "pause", "resume", "approve"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in Job._meta.fields if field.name not in CHANGEABLE]

    def update(self, request: HttpRequest, obj: Job, changes: dict[str, Any]) -> Job:
        return actions.change_job(obj, admin_user(request), changes)

    @admin.action(description="Kill the selected jobs")
    def kill(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, actions.kill_job, "killed")

    @admin.action(description="Pause the selected jobs")
    def pause(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, actions.pause_job, "paused")

    @admin.action(description="Resume the selected jobs")
    def resume(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, actions.resume_job, "resumed")

    @admin.action(description="Approve the selected jobs")
    def approve(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, actions.approve_job, "approved")

    def _each(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        job_action: Callable[[Job, User | None, str], Job],
        done: str,
    ) -> None:
        """The job action on each selected job, as the API calls it (its default reason)."""
        user = admin_user(request)
        run_each(self, request, queryset, lambda job: job_action(job, user, ""), done)
