from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from backend.accounts.api.views import (
    AllowedIpEventViewSet,
    AllowedIpViewSet,
    ApiTokenViewSet,
    SshKeyViewSet,
    UserViewSet,
    login_view,
    logout_view,
    me_view,
    session_view,
)
from backend.clusters.api.views import (
    GpuTypeViewSet,
    NodeViewSet,
    cluster_summary_view,
    vc_usage_view,
)
from backend.core.views import health_view, home_view
from backend.jobs.api.views import (
    JobArrayViewSet,
    JobViewSet,
    gpu_hours_export_view,
    gpu_hours_view,
)
from backend.monitoring.views import metrics_view
from backend.repairs.api.views import NodeFaultViewSet, NodeRepairViewSet
from backend.storage.api.views import (
    ExpiringFileViewSet,
    ExpiryRunViewSet,
    LargestPathViewSet,
    ScanViewSet,
    StorageRootViewSet,
    UsageViewSet,
)
from backend.vcs.api.views import VirtualClusterViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("job-arrays", JobArrayViewSet, basename="job-array")
router.register("vcs", VirtualClusterViewSet, basename="vc")
router.register("gpu-types", GpuTypeViewSet, basename="gpu-type")
router.register("nodes", NodeViewSet, basename="node")
router.register("users", UserViewSet, basename="user")
router.register("node-repairs", NodeRepairViewSet, basename="node-repair")
router.register("node-faults", NodeFaultViewSet, basename="node-fault")
router.register("me/tokens", ApiTokenViewSet, basename="token")
router.register("me/ssh-keys", SshKeyViewSet, basename="ssh-key")
router.register("me/allowed-ips", AllowedIpViewSet, basename="allowed-ip")
router.register("me/allowed-ip-events", AllowedIpEventViewSet, basename="allowed-ip-event")
router.register("storage/roots", StorageRootViewSet, basename="storage-root")
router.register("storage/scans", ScanViewSet, basename="storage-scan")
router.register("storage/usage", UsageViewSet, basename="storage-usage")
router.register("storage/largest-paths", LargestPathViewSet, basename="storage-largest-path")
router.register("storage/expiry-runs", ExpiryRunViewSet, basename="storage-expiry-run")
router.register("storage/expiring-files", ExpiringFileViewSet, basename="storage-expiring-file")

urlpatterns = [
    path("", home_view, name="home"),
    path("healthz", health_view, name="health"),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/me/", me_view, name="me"),
    path("api/v1/auth/login/", login_view, name="login"),
    path("api/v1/auth/logout/", logout_view, name="logout"),
    path("api/v1/auth/session/", session_view, name="session"),
    path("api/v1/cluster/summary/", cluster_summary_view, name="cluster-summary"),
    path("api/v1/cluster/vc-usage/", vc_usage_view, name="cluster-vc-usage"),
    path("api/v1/usage/gpu-hours/", gpu_hours_view, name="usage-gpu-hours"),
    path("api/v1/usage/gpu-hours/export/", gpu_hours_export_view, name="usage-gpu-hours-export"),
    path("api/v1/", include(router.urls)),
    path("api/auth/", include("rest_framework.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Split: the page loads its script from a URL, with no inline script (the CSP allows none).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    path("admin/", admin.site.urls),
    # The dashboard's client-side routes, so that its URLs can be shared and bookmarked.
    re_path(
        r"^(?:login|submit|jobs|cluster|vcs|quotas|storage|repairs|usage|me)(?:/.*)?$",
        home_view,
        name="dashboard",
    ),
]

# Errors answer JSON, and a database outage 503 with Retry-After (backend/core/outage.py).
handler500 = "backend.core.outage.server_error"
