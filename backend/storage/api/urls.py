"""The storage API: roots, scans, usage, largest paths and expiry."""

from backend.core.routers import AppRouter
from backend.storage.api.views import (
    ExpiringFileViewSet,
    ExpiryRunViewSet,
    LargestPathViewSet,
    ScanViewSet,
    StorageRootViewSet,
    UsageViewSet,
)

router = AppRouter()
router.register("storage/roots", StorageRootViewSet, basename="storage-root")
router.register("storage/scans", ScanViewSet, basename="storage-scan")
router.register("storage/usage", UsageViewSet, basename="storage-usage")
router.register("storage/largest-paths", LargestPathViewSet, basename="storage-largest-path")
router.register("storage/expiry-runs", ExpiryRunViewSet, basename="storage-expiry-run")
router.register("storage/expiring-files", ExpiringFileViewSet, basename="storage-expiring-file")

urlpatterns = router.urls
