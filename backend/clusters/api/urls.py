"""The clusters API: GPU types and nodes (the cluster's summary and use by VC are the jobs
API's, backend/jobs/api/cluster.py)."""

from backend.core.routers import AppRouter
from backend.jobmanager.api.views import (
    GpuTypeViewSet,
    NodeViewSet,
)

router = AppRouter()
router.register("gpu-types", GpuTypeViewSet, basename="gpu-type")
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = [
    *router.urls,
]
