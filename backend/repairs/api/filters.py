"""Query-string filters of the repairs API."""

import django_filters

from backend.clusters.models import Node
from backend.repairs.models import NodeFault


class NodeFaultFilter(django_filters.FilterSet):
    open = django_filters.BooleanFilter(
        field_name="cleared_at", lookup_expr="isnull", label="Only faults that still hold."
    )
    node = django_filters.CharFilter(field_name="node__name")

    class Meta:
        model = NodeFault
        fields = ["open", "node", "rule", "severity"]


class NodeRepairFilter(django_filters.FilterSet):
    class Meta:
        model = Node
        fields = ["repair_state"]
