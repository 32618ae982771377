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
    return refusal_for(
        request.headers.get("Authorization", ""),
        "X-Forwarded-For" in request.headers,
        request.META.get("REMOTE_ADDR", ""),
    )


def refusal_for(authorization: str, forwarded: bool, remote_address: str) -> str:
    """The bearer token when TRAINYARD_METRICS_TOKEN is set; else this host alone."""
    token = settings.TRAINYARD_METRICS_TOKEN
    if token:
        given = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else ""
        if given and hmac.compare_digest(given.encode(), token.encode()):
            return ""
        return "A valid bearer token (TRAINYARD_METRICS_TOKEN) is required."
    beyond = "Set TRAINYARD_METRICS_TOKEN to scrape from beyond this host."
    if forwarded:  # through a proxy on this host: not this host
        return beyond
    try:
        loopback = ipaddress.ip_address(remote_address).is_loopback
    except ValueError:
        loopback = False
    return "" if loopback else beyond


def registry(with_database: bool = True) -> CollectorRegistry:
    """Every process's counters and histograms (multiprocess mode), and the database's gauges."""
    combined = CollectorRegistry()
    multiprocess.MultiProcessCollector(combined)
    if with_database:
        combined.register(TrainyardCollector())
    return combined


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    refusal = scrape_refusal(request)
    if refusal:
        return JsonResponse({"detail": refusal}, status=403)
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
