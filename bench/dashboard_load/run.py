"""Dashboard first load: the jobs page of a VC holding 10,000 jobs, in headless Chromium.

    .venv/bin/python -m bench.dashboard_load.run [--jobs 10000] [--loads 15]

Fills the MariaDB database ``trainyard_bench_dashboard`` (created if missing; or
BENCH_DATABASE_URL) with one VC of ``--jobs`` jobs, unless it already holds them; builds
the dashboard (`make frontend`); serves the app with gunicorn as deploy/gunicorn.conf.py
does; signs in once, then loads ``/jobs?vc=...`` ``--loads`` times, each in a new browser
context (an empty cache: a first load), and times navigation start to a usable table (its
first page of rows on screen). Prints p50/p95/max and writes
``bench/results/dashboard_load.json``. The goal is under 1.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO_ROOT))

from bench.api_latency.run import configure_django  # noqa: E402

DEFAULT_DATABASE_URL = "mysql://root@127.0.0.1:3306/trainyard_bench_dashboard"
RESULTS_FILE = REPO_ROOT / "bench" / "results" / "dashboard_load.json"
GOAL_MS = 1500.0
VC_NAME = "bench-dashboard"
USERNAME = "bench-dashboard-user"
PASSWORD = "bench-dashboard-password"
GIB = 1024


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL"))
    parser.add_argument("--var-dir", default=os.environ.get("BENCH_VAR_DIR", "/tmp/bench-var"))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=15, help="measured first loads")
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--output", default=str(RESULTS_FILE))
    return parser.parse_args(argv)


def fill(job_count: int) -> None:
    """One VC with `job_count` jobs of one member, statuses as a busy VC has them."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import PBKDF2PasswordHasher
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from backend.clusters.models import GpuType, Node
    from backend.jobs.models import Job, JobStatus, new_job_id
    from backend.vcs.models import Membership, Quota, Role, VirtualCluster

    call_command("migrate", verbosity=0)
    if Job.objects.filter(vc__name=VC_NAME).count() == job_count:
        return
    started = time.perf_counter()
    with transaction.atomic():
        Job.objects.filter(vc__name=VC_NAME).delete()
        a100, _ = GpuType.objects.get_or_create(
            name="A100", defaults={"cpus_per_gpu": 12, "memory_per_gpu": 120 * GIB}
        )
        for index in range(8):
            Node.objects.get_or_create(
                name=f"bench-dash-a100-{index}",
                defaults={"gpu_type": a100, "gpus": 8, "cpus": 96, "memory": 1000 * GIB},
            )
        vc, _ = VirtualCluster.objects.get_or_create(name=VC_NAME)
        Quota.objects.get_or_create(
            vc=vc, gpu_type=a100, defaults={"gpus": 32, "cpus": 384, "memory": 3840 * GIB}
        )
        user, _ = get_user_model().objects.get_or_create(username=USERNAME)
        user.password = PBKDF2PasswordHasher().encode(PASSWORD, "benchsalt", iterations=1000)
        user.save()
        Membership.objects.get_or_create(vc=vc, user=user, defaults={"role": Role.MEMBER})
        rng = random.Random(5)
        statuses = [JobStatus.FINISHED] * 80 + [JobStatus.FAILED] * 10 + [JobStatus.QUEUED] * 6
        statuses += [JobStatus.RUNNING] * 4
        now = timezone.now()
        jobs = []
        for index in range(job_count):
            submitted = now - timedelta(minutes=job_count - index)
            status = rng.choice(statuses)
            running_or_done = status != JobStatus.QUEUED
            jobs.append(
                Job(
                    job_id=new_job_id(),
                    owner=user,
                    vc=vc,
                    gpu_type=a100,
                    name=f"exp-{index:05d}",
                    command="python train.py --epochs 90",
                    workers=1,
                    gpus_per_worker=rng.choice([1, 2, 4, 8]),
                    cpus_per_worker=12,
                    memory_per_worker=120 * GIB,
                    max_wall_time=86400,
                    status=status,
                    submitted_at=submitted,
                    queued_at=submitted,
                    updated_at=submitted,
                    started_at=submitted + timedelta(seconds=30) if running_or_done else None,
                )
            )
        Job.objects.bulk_create(jobs, batch_size=2000)
    print(f"filled {job_count} jobs in {time.perf_counter() - started:.1f} s", flush=True)


def measure(base_url: str, loads: int) -> list[float]:
    """Milliseconds from navigation start to the jobs table's rows on screen, per load."""
    from tests.e2e.dashboard import chromium

    timings = []
    with chromium() as browser:
        signed_in = browser.new_context(base_url=base_url)
        answer = signed_in.request.post(
            "/api/v1/auth/login/", data={"username": USERNAME, "password": PASSWORD}
        )
        assert answer.ok, answer.text()
        state = signed_in.storage_state()
        signed_in.close()
        for load in range(loads + 1):  # the first warms the servers, and is not counted
            context = browser.new_context(
                base_url=base_url, storage_state=state, viewport={"width": 1366, "height": 800}
            )
            page = context.new_page()
            started = time.perf_counter()
            page.goto(f"/jobs?vc={VC_NAME}")
            page.locator("table[aria-label=Jobs] tbody tr").nth(49).wait_for(timeout=30_000)
            elapsed = (time.perf_counter() - started) * 1000
            count = page.locator("text=/Page 1 of \\d+ · \\d+ jobs/").inner_text()
            if load:
                timings.append(elapsed)
            context.close()
    print(f"pager reads: {count}", flush=True)
    return timings


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    database_url = args.database_url or DEFAULT_DATABASE_URL
    configure_django(database_url, args.var_dir)
    fill(args.jobs)
    subprocess.run(["make", "-s", "frontend"], cwd=REPO_ROOT, check=True)
    from tests.polling import wait_until
    from tests.servers import free_port, is_healthy, kill_process_group

    port = free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "backend.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(args.workers), "--log-level", "warning"],
        cwd=REPO_ROOT, env=os.environ.copy(), start_new_session=True,
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: is_healthy(base_url), 60, "gunicorn")
        timings = measure(base_url, args.loads)
    finally:
        kill_process_group(web)
    timings.sort()
    p95 = timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))]
    result = {
        "jobs_in_vc": args.jobs,
        "loads": len(timings),
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(timings[-1], 1),
        "goal_ms": GOAL_MS,
        "gunicorn_workers": args.workers,
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
    }
    print(
        f"jobs page, first load with {args.jobs} jobs in the VC ({len(timings)} loads): "
        f"p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms, max {result['max_ms']} ms "
        f"(goal < {GOAL_MS:.0f} ms: {'met' if p95 < GOAL_MS else 'NOT met'})"
    )
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
