from django.contrib import admin

from backend.clusters.models import GpuType, Node


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    list_display = ["name", "cpus_per_gpu", "memory_per_gpu"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "gpu_type", "gpus", "cpus", "memory", "schedulable", "repair_state"]
    list_filter = ["gpu_type", "schedulable", "repair_state"]
    search_fields = ["name"]
