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


def health_view(request: HttpRequest) -> JsonResponse:
    """200 when the database answers, 503 when it does not. Probes should ask the health
    server (backend/core/health.py), which no burst of requests holds up."""
    status, body = database_status()
    return JsonResponse(body, status=status)
