"""The landing page and a health check for load balancers and probes."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


def home_view(request: HttpRequest) -> HttpResponse:
    """Until the dashboard is built, the landing page points to the API and its docs."""
    return render(request, "home.html")


def health_view(request: HttpRequest) -> JsonResponse:
    """200 when the database answers, 503 when it does not."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # any database failure means "not ready"
        return JsonResponse({"status": "unavailable", "database": str(error)}, status=503)
    return JsonResponse({"status": "ok"})
