"""Who the repair manager's (and the idle watch's) emails go to; they are sent through
the one outbox, ``backend.core.outbox``."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model


def cluster_admin_addresses() -> list[str]:
    """Cluster admins with an email address, and TRAINYARD_REPAIR_ALERT_EMAILS."""
    staff = get_user_model().objects.filter(is_staff=True, is_active=True).exclude(email="")
    addresses = [*staff.values_list("email", flat=True), *settings.TRAINYARD_REPAIR_ALERT_EMAILS]
    return sorted(set(addresses))
