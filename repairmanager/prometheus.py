"""Instant PromQL queries over Prometheus's HTTP API (``/api/v1/query``)."""

from __future__ import annotations

from dataclasses import dataclass

import requests


class PrometheusUnavailable(RuntimeError):
    """Prometheus could not be reached, or did not answer the query."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: dict[str, str]
    value: float


class PrometheusClient:
    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()

    def query(self, promql: str) -> list[Sample]:
        """The instant vector (or scalar) ``promql`` evaluates to now."""
        try:
            response = self.session.get(
                f"{self.base_url}/api/v1/query", params={"query": promql}, timeout=self.timeout
            )
            body = response.json()
        except (requests.RequestException, ValueError) as error:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url}: {error}") from error
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusUnavailable(
                f"Prometheus answered {response.status_code} to {promql!r}: "
                f"{body.get('error', 'no result')}"
            )
        data = body["data"]
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        if data["resultType"] != "vector":
            raise PrometheusUnavailable(f"{promql!r} is a {data['resultType']}, not a vector")
        return [Sample(dict(row["metric"]), float(row["value"][1])) for row in data["result"]]
