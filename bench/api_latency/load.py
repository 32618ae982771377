"""A cheap closed-loop load generator: N threads, each with one keep-alive HTTP connection.

Each client sends its next request as soon as the previous answer is read; latency is the
time from sending the request to reading the whole body, measured with ``perf_counter``.
"""

from __future__ import annotations

import http.client
import itertools
import json
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# A request: method, path, headers, body (bytes or None).
HttpRequest = tuple[str, str, dict[str, str], bytes | None]


@dataclass
class ScenarioResult:
    """One scenario's figures, whichever load generator measured them."""

    name: str
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    cpu_ms_per_request: dict[str, float] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    # What only one load generator knows (the Python client: fairness between clients).
    details: dict[str, object] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, object]:
        return {
            "scenario": self.name,
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "throughput_rps": round(self.throughput, 1),
            "p50_ms": round(self.p50_ms, 2),
            "p95_ms": round(self.p95_ms, 2),
            "p99_ms": round(self.p99_ms, 2),
            "max_ms": round(self.max_ms, 2),
            "cpu_ms_per_request": self.cpu_ms_per_request,
            "error_samples": self.error_samples[:5],
            **self.details,
        }


def percentile(latencies_ms: list[float], fraction: float) -> float:
    """Nearest-rank percentile of the latencies, in milliseconds."""
    ordered = sorted(latencies_ms)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def run_scenario(
    name: str,
    port: int,
    make_request: Callable[[random.Random], HttpRequest],
    expected_status: int,
    clients: int,
    requests: int,
    warmup: int,
    seed: int = 7,
) -> ScenarioResult:
    """Send ``warmup`` then ``requests`` requests from ``clients`` concurrent connections."""
    ticket = itertools.count()
    total = warmup + requests
    latencies: list[float] = []
    errors: list[str] = []
    client_medians: list[float] = []
    opened = [0]
    lock = threading.Lock()
    measured_start: list[float] = []
    measured_end: list[float] = [0.0]
    barrier = threading.Barrier(clients)

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        local_latencies: list[float] = []
        local_errors: list[str] = []
        local_opened = 0
        barrier.wait()
        try:
            while True:
                number = next(ticket)  # atomic under the GIL
                if number >= total:
                    break
                if number == warmup:
                    measured_start.append(time.perf_counter())
                method, path, headers, body = make_request(rng)
                local_opened += connection.sock is None
                sent = time.perf_counter()
                try:
                    connection.request(method, path, body=body, headers=headers)
                    response = connection.getresponse()
                    payload = response.read()
                    status = response.status
                except (OSError, http.client.HTTPException) as error:
                    connection.close()
                    status, payload = 0, repr(error).encode()
                elapsed_ms = (time.perf_counter() - sent) * 1000
                if number < warmup:
                    continue
                local_latencies.append(elapsed_ms)
                if status != expected_status:
                    local_errors.append(f"{status} {method} {path}: {payload[:200]!r}")
        finally:
            connection.close()
            with lock:
                latencies.extend(local_latencies)
                if local_latencies:
                    client_medians.append(sorted(local_latencies)[len(local_latencies) // 2])
                errors.extend(local_errors)
                opened[0] += local_opened
                measured_end[0] = max(measured_end[0], time.perf_counter())

    # A short switch interval keeps one client from holding the GIL while others have
    # answers waiting, which would count as server latency.
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous_interval)
    seconds = measured_end[0] - (measured_start[0] if measured_start else measured_end[0])
    return ScenarioResult(
        name=name,
        requests=len(latencies),
        errors=len(errors),
        seconds=seconds,
        p50_ms=percentile(latencies, 0.50),
        p95_ms=percentile(latencies, 0.95),
        p99_ms=percentile(latencies, 0.99),
        max_ms=max(latencies, default=float("nan")),
        error_samples=errors,
        details={
            "load_generator": "python",
            # Median latency seen by each client: spread here means unfair sharing.
            "client_p50_ms": sorted(round(value, 1) for value in client_medians),
            # TCP connections opened: one per client when the server keeps each alive.
            "connections_opened": opened[0],
        },
    )


def json_body(payload: object) -> bytes:
    return json.dumps(payload).encode()
