"""PromQL queries over Prometheus's HTTP API: instant (``/api/v1/query``) and over a time
range (``/api/v1/query_range``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests


class PrometheusUnavailable(RuntimeError):
    """Prometheus could not be reached, or did not answer the query."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]]  # (unix time, value)


class PrometheusClient:
    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()

    def query(self, promql: str) -> list[Sample]:
        """The instant vector (or scalar) ``promql`` evaluates to now."""
        data = self._get("query", promql, {})
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        if data["resultType"] != "vector":
            raise PrometheusUnavailable(f"{promql!r} is a {data['resultType']}, not a vector")
        return [Sample(dict(row["metric"]), float(row["value"][1])) for row in data["result"]]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        """The range vector ``promql`` evaluates to from ``start`` to ``end`` (unix times),
        one point per ``step`` seconds."""
        data = self._get("query_range", promql, {"start": start, "end": end, "step": step})
        if data["resultType"] != "matrix":
            raise PrometheusUnavailable(f"{promql!r} is a {data['resultType']}, not a matrix")
        return [
            Series(dict(row["metric"]), [(float(at), float(value)) for at, value in row["values"]])
            for row in data["result"]
        ]

    def _get(self, endpoint: str, promql: str, params: dict[str, float]) -> dict[str, Any]:
        query_params: dict[str, str | float] = {"query": promql, **params}
        try:
            response = self.session.get(
                f"{self.base_url}/api/v1/{endpoint}",
                params=query_params,
                timeout=self.timeout,
            )
            body = response.json()
        except (requests.RequestException, ValueError) as error:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url}: {error}") from error
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusUnavailable(
                f"Prometheus answered {response.status_code} to {promql!r}: "
                f"{body.get('error', 'no result')}"
            )
        data: dict[str, Any] = body["data"]
        return data
