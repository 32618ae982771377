"""Query-string filters of the clusters API."""

import django_filters

from backend.clusters.models import Node


class NodeFilter(django_filters.FilterSet):
    class Meta:
        model = Node
        fields = ["gpu_type__name", "schedulable", "repair_state"]
