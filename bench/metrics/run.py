"""/metrics scrape time with 100,000 jobs in MariaDB (issue 15's goal: under 200 ms).

    .venv/bin/python -m bench.metrics.run [--scrapes 200] [--refill]

Fills (or re-uses) the API latency benchmark's data set (bench/api_latency/dataset.py:
100,000 jobs over 50 VCs, 500 users, 100 nodes) in ``BENCH_DATABASE_URL`` (default
``mysql://root@127.0.0.1:3306/trainyard_bench_metrics``), serves the app with gunicorn on a
loopback port, scrapes ``/metrics`` as Prometheus does (one request at a time) and prints
p50/p95/p99 in ms, with the series count; writes ``bench/results/metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO_ROOT))

from bench.api_latency.run import configure_django, free_port, prepare_data  # noqa: E402

DEFAULT_DATABASE_URL = "mysql://root@127.0.0.1:3306/trainyard_bench_metrics"
DEFAULT_VAR_DIR = "/tmp/bench-var-metrics"
RESULTS_FILE = REPO_ROOT / "bench" / "results" / "metrics.json"
GOAL_P95_MS = 200.0


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def scrape(url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
    return (time.perf_counter() - started) * 1000, body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL"))
    parser.add_argument("--var-dir", default=os.environ.get("BENCH_VAR_DIR", DEFAULT_VAR_DIR))
    parser.add_argument("--refill", action="store_true")
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--output", default=str(RESULTS_FILE))
    args = parser.parse_args(argv)
    database_url = args.database_url or DEFAULT_DATABASE_URL
    configure_django(database_url, args.var_dir)
    prepare_data(args.refill)
    from backend.jobs.models import Job

    jobs = Job.objects.count()
    from django.conf import settings

    for stale in settings.TRAINYARD_METRICS_DIR.glob("*.db"):  # earlier runs' processes
        stale.unlink()
    port = free_port()
    env = os.environ | {"DATABASE_URL": database_url, "TRAINYARD_VAR_DIR": args.var_dir}
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "backend.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--log-level", "warning"],
        cwd=REPO_ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                scrape(url)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for _ in range(args.warmup):
            scrape(url)
        timings, body = [], b""
        for _ in range(args.scrapes):
            took, body = scrape(url)
            timings.append(took)
    finally:
        server.terminate()
        server.wait(timeout=30)
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    result = {
        "jobs": jobs,
        "scrapes": args.scrapes,
        "series": series,
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(percentile(timings, 0.95), 1),
        "p99_ms": round(percentile(timings, 0.99), 1),
        "goal_p95_ms": GOAL_P95_MS,
        "machine": f"{platform.node()} {os.cpu_count()} cores",
    }
    verdict = "met" if result["p95_ms"] < GOAL_P95_MS else "MISSED"
    print(
        f"/metrics with {jobs:,} jobs ({series} series, {args.scrapes} scrapes): "
        f"p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms "
        f"(goal p95 < {GOAL_P95_MS:.0f} ms: {verdict})"
    )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["p95_ms"] < GOAL_P95_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
