from django.contrib import admin

from backend.vcs.models import Membership, Quota, VirtualCluster


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(VirtualCluster)
class VirtualClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "policy", "max_wall_time", "max_interactive_gpus", "user_gpu_limit"]
    search_fields = ["name"]
    inlines = [QuotaInline, MembershipInline]
