"""GET /metrics: Prometheus's text format, for a scraper holding TRAINYARD_METRICS_TOKEN
(as a bearer token) or, without a token configured, for this host's root, the portal's
own account and TRAINYARD_METRICS_LOCAL_ACCOUNTS alone: jobs run on this host as their
owners' accounts, and reach its loopback ports as well as anyone."""

from __future__ import annotations

import hmac
import ipaddress
import os
import pwd

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

from backend.core.front import FRONT_SERVER
from backend.core.local_peers import peer_uid
from backend.monitoring.collectors import TrainyardCollector


def scrape_refusal(request: HttpRequest) -> str:
    """Why this request may not scrape, or '' when it may."""
    return refusal_for(
        request.headers.get("Authorization", ""),
        "X-Forwarded-For" in request.headers,
        request.META.get("REMOTE_ADDR", ""),
        str(request.META.get("REMOTE_PORT", "")),
        request.META.get(FRONT_SERVER),
    )


def refusal_for(
    authorization: str,
    forwarded: bool,
    remote_address: str,
    remote_port: str,
    served_at: tuple[str, int] | None = None,
) -> str:
    """The bearer token when TRAINYARD_METRICS_TOKEN is set; else this host's scraping
    accounts alone (``local_scraper_uids``), told by the client socket's owner (connected
    to ``served_at`` when the front accepted the connection)."""
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
    if not loopback:
        return beyond
    uid = peer_uid(remote_address, int(remote_port), served_at) if remote_port.isdigit() else None
    if uid is None:
        return f"Which account of this host connected could not be told. {beyond}"
    if uid not in local_scraper_uids():
        return (
            "Of this host's accounts only root, the portal's own and "
            "TRAINYARD_METRICS_LOCAL_ACCOUNTS may scrape without TRAINYARD_METRICS_TOKEN "
            "(jobs run here as their owners)."
        )
    return ""


def local_scraper_uids() -> set[int]:
    """Root, the portal's own account, and the accounts TRAINYARD_METRICS_LOCAL_ACCOUNTS
    names that this host has (Debian's Prometheus runs as ``prometheus``)."""
    uids = {0, os.getuid()}
    for name in settings.TRAINYARD_METRICS_LOCAL_ACCOUNTS:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
    return uids


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
