from django.contrib import admin

from backend.jobs.models import Job, JobAttempt, JobEvent


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["from_status", "to_status", "actor_name", "reason", "created_at"]
    exclude = ["actor"]
    can_delete = False


class JobAttemptInline(admin.TabularInline):
    model = JobAttempt
    extra = 0
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
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
    raw_id_fields = ["owner"]
    inlines = [JobAttemptInline, JobEventInline]
