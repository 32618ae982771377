"""The clusters API: GPU types, nodes, and the cluster's summary and use by VC."""

from django.urls import path

from backend.clusters.api.views import (
    GpuTypeViewSet,
    NodeViewSet,
    cluster_summary_view,
    vc_usage_view,
)
from backend.core.routers import AppRouter

router = AppRouter()
router.register("gpu-types", GpuTypeViewSet, basename="gpu-type")
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = [
    path("cluster/summary/", cluster_summary_view, name="cluster-summary"),
    path("cluster/vc-usage/", vc_usage_view, name="cluster-vc-usage"),
    *router.urls,
]
