"""The jobs API: jobs, job arrays, and GPU-hours."""

from django.urls import path

from backend.core.routers import AppRouter
from backend.jobs.api.views import (
    JobArrayViewSet,
    JobViewSet,
    gpu_hours_export_view,
    gpu_hours_view,
)

router = AppRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("job-arrays", JobArrayViewSet, basename="job-array")

urlpatterns = [
    path("usage/gpu-hours/", gpu_hours_view, name="usage-gpu-hours"),
    path("usage/gpu-hours/export/", gpu_hours_export_view, name="usage-gpu-hours-export"),
    *router.urls,
]
