"""GET /metrics: Prometheus's text format, for a scraper holding TRAINYARD_METRICS_TOKEN
(as a bearer token) or, without a token configured, for this host alone."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

from backend.monitoring.collectors import TrainyardCollector


def scrape_refusal(request: HttpRequest) -> str:
    """Why this request may not scrape, or '' when it may."""
    token = settings.TRAINYARD_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "")
        if given.startswith("Bearer ") and hmac.compare_digest(
            given.removeprefix("Bearer ").encode(), token.encode()
        ):
            return ""
        return "A valid bearer token (TRAINYARD_METRICS_TOKEN) is required."
    if "X-Forwarded-For" in request.headers:  # through a proxy on this host: not this host
        return "Set TRAINYARD_METRICS_TOKEN to scrape from beyond this host."
    try:
        loopback = ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        loopback = False
    return "" if loopback else "Set TRAINYARD_METRICS_TOKEN to scrape from beyond this host."


def registry() -> CollectorRegistry:
    """Every process's counters and histograms (multiprocess mode), and the database's gauges."""
    combined = CollectorRegistry()
    multiprocess.MultiProcessCollector(combined)
    combined.register(TrainyardCollector())
    return combined


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    refusal = scrape_refusal(request)
    if refusal:
        return JsonResponse({"detail": refusal}, status=403)
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
