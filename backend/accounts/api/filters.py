"""Query-string filters of the accounts API."""

import django_filters
from django.contrib.auth import get_user_model

from backend.accounts.models import AllowedIpEvent


class AllowedIpEventFilter(django_filters.FilterSet):
    class Meta:
        model = AllowedIpEvent
        fields = ["kind"]


class UserFilter(django_filters.FilterSet):
    class Meta:
        model = get_user_model()
        fields = ["is_active", "is_staff"]
