"""The jobs API: jobs, job arrays, GPU-hours, the cluster's summary and use by VC, and a
VC's queue and deadlines (under the VC's URL; the VC itself is the VCs' API's)."""

from django.urls import path

from backend.core.routers import AppRouter
from backend.jobs.api.cluster import cluster_summary_view, vc_usage_view
from backend.jobs.api.vc_jobs import VcJobsViewSet
from backend.jobs.api.views import (
    JobArrayViewSet,
    JobViewSet,
    gpu_hours_export_view,
    gpu_hours_view,
)

router = AppRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("job-arrays", JobArrayViewSet, basename="job-array")
# Detail actions only (/vcs/{name}/queue/, /vcs/{name}/deadlines/), named as the VCs' are.
router.register("vcs", VcJobsViewSet, basename="vc")

urlpatterns = [
    path("cluster/summary/", cluster_summary_view, name="cluster-summary"),
    path("cluster/vc-usage/", vc_usage_view, name="cluster-vc-usage"),
    path("usage/gpu-hours/", gpu_hours_view, name="usage-gpu-hours"),
    path("usage/gpu-hours/export/", gpu_hours_export_view, name="usage-gpu-hours-export"),
    *router.urls,
]
