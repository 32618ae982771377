"""The virtual clusters API: VCs, their quotas and members (their queues and deadlines are
the jobs API's, under the same /vcs/{name}/)."""

from backend.core.routers import AppRouter
from backend.vcs.api.views import VirtualClusterViewSet

router = AppRouter()
router.register("vcs", VirtualClusterViewSet, basename="vc")

urlpatterns = router.urls
