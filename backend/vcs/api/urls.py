"""The virtual clusters API: VCs, their quotas, queues and members."""

from backend.core.routers import AppRouter
from backend.jobs.api.vc_views import VirtualClusterViewSet

router = AppRouter()
router.register("vcs", VirtualClusterViewSet, basename="vc")

urlpatterns = router.urls
