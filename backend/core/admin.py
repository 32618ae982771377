from django.contrib import admin

from backend.core.models import OutgoingEmail


@admin.register(OutgoingEmail)
class OutgoingEmailAdmin(admin.ModelAdmin):
    list_display = ["subject", "created_at", "sent_at", "attempts"]
    readonly_fields = ["key"]
