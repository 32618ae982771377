"""The repairs API: each node's repair state and history, and the faults seen."""

from backend.core.routers import AppRouter
from backend.repairs.api.views import NodeFaultViewSet, NodeRepairViewSet

router = AppRouter()
router.register("node-repairs", NodeRepairViewSet, basename="node-repair")
router.register("node-faults", NodeFaultViewSet, basename="node-fault")

urlpatterns = router.urls
