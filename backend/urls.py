from importlib import import_module

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import BaseRouter, DefaultRouter
from rest_framework.urlpatterns import format_suffix_patterns

from backend.core.views import health_view, home_view, not_found_view
from backend.monitoring.views import metrics_view

# Each app's API routes (its api/urls.py, as NetBox has them), all under /api/v1/.
API_URLCONFS = [
    "backend.jobs.api.urls",
    "backend.vcs.api.urls",
    "backend.clusters.api.urls",
    "backend.accounts.api.urls",
    "backend.repairs.api.urls",
    "backend.storage.api.urls",
]
API_ROUTERS: list[BaseRouter] = [import_module(urlconf).router for urlconf in API_URLCONFS]


def api_root_urls(routers: list[BaseRouter]) -> list[URLPattern | URLResolver]:
    """The browsable API's root, /api/v1/, listing every app's viewsets."""
    root = DefaultRouter()
    for router in routers:
        root.registry.extend(router.registry)
    return format_suffix_patterns([path("", root.get_api_root_view(), name="api-root")])


urlpatterns = [
    path("", home_view, name="home"),
    path("healthz", health_view, name="health"),
    path("metrics", metrics_view, name="metrics"),
    *(path("api/v1/", include(urlconf)) for urlconf in API_URLCONFS),
    path("api/v1/", include(api_root_urls(API_ROUTERS))),
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
# An unknown page answers the dashboard, which says so in its own words; the API, JSON.
handler404 = not_found_view
