"""The secret by which a job's exposed servers know the endpoint proxy (and no one else)."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings


def endpoint_token(job_id: str) -> str:
    """Derived from the portal's secret key: the proxy and the job's launch agree on it
    without storing it; the job gets it as TRAINYARD_ENDPOINT_TOKEN."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"trainyard-endpoint:{job_id}".encode(), hashlib.sha256).hexdigest()


def endpoint_env(job_id: str) -> dict[str, str]:
    """What a job that exposes ports is told: the token, and the path its servers are
    reached under (``$TRAINYARD_ENDPOINTS_PATH<name>/``)."""
    return {
        "TRAINYARD_ENDPOINT_TOKEN": endpoint_token(job_id),
        "TRAINYARD_ENDPOINTS_PATH": f"/endpoints/{job_id}/",
    }
