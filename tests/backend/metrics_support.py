"""Scraping the portal's /metrics in a test: the token it scrapes with (an autouse fixture
where imported) and the samples parsed from the answer."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


SCRAPE_TOKEN = "test-scrape-token"


@pytest.fixture(autouse=True)
def scrape_token(settings) -> None:
    """The test client connects through no socket, so only a token can let it scrape
    (who may scrape from this host without one: tests/backend/monitoring/test_serve_metrics.py)."""
    settings.TRAINYARD_METRICS_TOKEN = SCRAPE_TOKEN


def scrape(client: Client | None = None, **headers) -> dict:
    headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {SCRAPE_TOKEN}")
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content.decode())
