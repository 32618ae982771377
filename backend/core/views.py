"""The landing page and a health check for load balancers and probes."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import ensure_csrf_cookie

from backend.core.health import database_status


@never_cache
@ensure_csrf_cookie
def home_view(request: HttpRequest) -> HttpResponse:
    """The dashboard's page for `/` and every client-side route (history-API fallback).

    Its scripts and styles are static files with hashed names; this page is never cached,
    and it sets the CSRF cookie the dashboard sends back on writes. Without a built
    dashboard (`npm run build` in frontend/), a landing page points to the API and its docs.
    """
    index = settings.DASHBOARD_BUILD_DIR / "index.html"
    if index.is_file():
        return HttpResponse(index.read_bytes(), content_type="text/html; charset=utf-8")
    return render(request, "home.html")


# Paths that programs ask for: an unknown one answers JSON, not the dashboard's page.
MACHINE_PATH_PREFIXES = ("/api/", "/metrics", "/healthz", "/static/", "/endpoints/")


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The 404 handler: JSON for the API and other programs' paths; for any other path the
    dashboard's page with status 404, which shows the dashboard's own "Page not found"."""
    if request.path.startswith(MACHINE_PATH_PREFIXES):
        return JsonResponse({"detail": "Not found."}, status=404)
    page = home_view(request)
    page.status_code = 404
    return page


def health_view(request: HttpRequest) -> JsonResponse:
    """200 when the database answers, 503 when it does not. Probes should ask the health
    server (backend/core/health.py), which no burst of requests holds up."""
    status, body = database_status()
    return JsonResponse(body, status=status)
