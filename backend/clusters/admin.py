from django.contrib import admin

from backend.clusters.models import GpuType, Node
from backend.jobs.triggers import run_job_manager_after_commit


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    list_display = ["name", "cpus_per_gpu", "memory_per_gpu"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name", "gpu_type", "gpus", "cpus", "memory", "schedulable", "repair_state",
        "dedicated_vc",
    ]  # fmt: skip
    list_filter = ["gpu_type", "schedulable", "repair_state", "dedicated_vc"]
    search_fields = ["name"]

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        run_job_manager_after_commit()  # a node added or changed changes what fits

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        run_job_manager_after_commit()

    def delete_queryset(self, request, queryset) -> None:
        super().delete_queryset(request, queryset)
        run_job_manager_after_commit()
