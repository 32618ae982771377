"""The clusters API: GPU types and nodes (the cluster's summary and use by VC are the jobs
API's, backend/jobs/api/cluster.py)."""

from backend.clusters.api.views import (
    GpuTypeViewSet,
    NodeViewSet,
)
from backend.core.routers import AppRouter

router = AppRouter()
router.register("gpu-types", GpuTypeViewSet, basename="gpu-type")
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = [
    *router.urls,
]
