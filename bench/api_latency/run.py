"""API latency benchmark: job list, job detail and submit, 16 concurrent clients, gunicorn.

    .venv/bin/python -m bench.api_latency.run [--refill] [--seconds 15] [--sweep 4x1,6x1]

Fills the MariaDB database ``trainyard_bench`` (created if missing) with 100,000 jobs over
50 VCs and 500 users, unless it already holds them; serves the app with gunicorn as
deploy/gunicorn.conf.py does, on a free loopback port; drives each scenario with 16
closed-loop clients (wrk, or the built-in Python client) acting as different VC members;
prints p50/p95/p99 and writes ``bench/results/api_latency.json``.
The goal is a p95 under 100 ms for each scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: python bench/api_latency/run.py
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_DATABASE_URL = "mysql://root@127.0.0.1:3306/trainyard_bench"
DEFAULT_VAR_DIR = "/tmp/bench-var"
RESULTS_FILE = REPO_ROOT / "bench" / "results" / "api_latency.json"
GOAL_P95_MS = 100.0
# As deploy/gunicorn.conf.py serves the app: sync workers, two per core.
DEFAULT_WORKERS = 2 * (os.cpu_count() or 1)
DEFAULT_THREADS = 1
DEFAULT_WORKER_CONNECTIONS = None
DEFAULT_WORKER_CLASS = "sync"
PERSONAS = 64
SUBMITTED_NAME = "bench-submit"


@dataclass(frozen=True)
class Persona:
    """A benchmark user acting in one of their VCs."""

    username: str
    vc: str
    role: str
    token: str
    job_ids: tuple[str, ...]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL"))
    parser.add_argument("--var-dir", default=os.environ.get("BENCH_VAR_DIR", DEFAULT_VAR_DIR))
    parser.add_argument("--refill", action="store_true", help="refill the data set")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=2000, help="measured, per scenario")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured, per scenario")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    parser.add_argument(
        "--load-generator",
        choices=["wrk", "python"],
        default="wrk" if shutil.which("wrk") else "python",
        help="wrk (Debian package) or the built-in Python client",
    )
    parser.add_argument("--seconds", type=int, default=15, help="measured, per scenario (wrk)")
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs per configuration, each on a fresh server"
    )
    parser.add_argument("--warmup-seconds", type=int, default=3, help="per scenario (wrk)")
    parser.add_argument("--worker-class", default=DEFAULT_WORKER_CLASS, choices=["gthread", "sync"])
    parser.add_argument(
        "--worker-connections", type=int, default=DEFAULT_WORKER_CONNECTIONS, metavar="N"
    )
    parser.add_argument(
        "--sweep",
        default="",
        help="compare gunicorn configs WORKERSxTHREADS[xCONNECTIONS],... instead of one run",
    )
    parser.add_argument(
        "--scenarios", default="list,detail,submit", help="comma-separated subset to run"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="profile N requests per scenario in-process (cProfile, query counts); no load",
    )
    parser.add_argument("--output", default=str(RESULTS_FILE))
    return parser.parse_args(argv)


def configure_django(database_url: str, var_dir: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["TRAINYARD_VAR_DIR"] = var_dir
    os.environ.setdefault("TRAINYARD_LOG_LEVEL", "WARNING")
    # A submission wakes the job manager through Redis, as in production (no worker runs
    # here, so the wake-ups collapse into one queued task every 30 s).
    os.environ.setdefault(
        "REDIS_URL", os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    os.environ.setdefault("TRAINYARD_REDIS_PREFIX", "trainyard-bench")
    os.environ.setdefault("TRAINYARD_CELERY_QUEUE", "trainyard-bench")
    os.environ["DJANGO_SETTINGS_MODULE"] = "backend.settings"
    os.environ.pop("TRAINYARD_DEBUG", None)
    create_database(database_url)
    import django

    django.setup()


def create_database(database_url: str) -> None:
    import MySQLdb

    url = urlparse(database_url)
    name = url.path.lstrip("/")
    connection = MySQLdb.connect(
        host=url.hostname or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
    )
    try:
        connection.cursor().execute(
            f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4"
            " COLLATE utf8mb4_unicode_ci"
        )
    finally:
        connection.close()


def prepare_data(refill: bool) -> dict[str, object]:
    from django.core.management import call_command

    from bench.api_latency import dataset

    call_command("migrate", verbosity=0)
    if refill or not dataset.is_filled():
        print("Filling the benchmark database (100,000 jobs)...", flush=True)
        dataset.fill()
    else:
        print("Re-using the filled benchmark database (--refill to rebuild).", flush=True)
    forget_submitted_jobs()
    size = dataset.current_size()
    return {
        "jobs": size.jobs,
        "job_events": size.events,
        "users": size.users,
        "vcs": size.vcs,
        "nodes": size.nodes,
    }


def forget_submitted_jobs() -> None:
    """Delete the jobs earlier runs submitted, so that every run sees the same data, then
    wait until InnoDB has purged them: its purge threads would otherwise compete with the
    measured requests for the same two cores."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE e FROM jobs_jobevent e JOIN jobs_job j ON j.id = e.job_id WHERE j.name = %s",
            [SUBMITTED_NAME],
        )
        cursor.execute("DELETE FROM jobs_job WHERE name = %s", [SUBMITTED_NAME])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            cursor.execute("SHOW ENGINE INNODB STATUS")
            status = cursor.fetchone()[2]
            match = re.search(r"History list length (\d+)", status)
            if match is None or int(match.group(1)) < 100:
                return
            time.sleep(0.5)


def make_personas(count: int, seed: int = 3) -> list[Persona]:
    """Members (and a few VC admins) with a fresh API token, each in one of their VCs."""
    from backend.accounts.actions import create_api_token
    from backend.accounts.models import ApiToken
    from backend.jobs.models import Job
    from backend.vcs.models import Membership, Role
    from bench.api_latency.dataset import USER_PREFIX

    rng = random.Random(seed)
    memberships = list(
        Membership.objects.filter(user__username__startswith=USER_PREFIX)
        .select_related("user", "vc")
        .order_by("id")
    )
    admins = [m for m in memberships if m.role == Role.ADMIN]
    members = [m for m in memberships if m.role != Role.ADMIN]
    admin_count = max(1, count // 10)
    chosen = rng.sample(admins, admin_count) + rng.sample(members, count - admin_count)
    rng.shuffle(chosen)
    users = {m.user_id: m.user for m in chosen}
    ApiToken.objects.filter(user__in=users.values(), name="bench").delete()
    tokens = {user_id: create_api_token(user, "bench")[1] for user_id, user in users.items()}
    job_ids: dict[int, list[str]] = {}
    for owner_id, job_id in Job.objects.filter(owner_id__in=users).values_list(
        "owner_id", "job_id"
    ):
        job_ids.setdefault(owner_id, []).append(job_id)
    return [
        Persona(
            username=m.user.username,
            vc=m.vc.name,
            role=m.role,
            token=tokens[m.user_id],
            job_ids=tuple(job_ids.get(m.user_id, ())),
        )
        for m in chosen
    ]


def scenario_requests(personas: list[Persona]):
    """The request makers of each scenario; each picks a persona at random."""
    from bench.api_latency.load import json_body

    with_jobs = [p for p in personas if p.job_ids]

    def headers(persona: Persona) -> dict[str, str]:
        return {"Authorization": f"Token {persona.token}", "Accept": "application/json"}

    def job_list(rng: random.Random):
        persona = rng.choice(personas)
        return "GET", f"/api/v1/jobs/?vc={persona.vc}", headers(persona), None

    def job_detail(rng: random.Random):
        persona = rng.choice(with_jobs)
        job_id = rng.choice(persona.job_ids)
        return "GET", f"/api/v1/jobs/{job_id}/", headers(persona), None

    def submit(rng: random.Random):
        persona = rng.choice(personas)
        body = {
            "vc": persona.vc,
            "name": SUBMITTED_NAME,
            "command": f"python train.py --epochs 1 --seed {rng.randrange(1000)}",
            "gpu_type": "A100",
            "gpus_per_worker": 1,
            "env": {"LR": "0.01"},
        }
        request_headers = headers(persona) | {"Content-Type": "application/json"}
        return "POST", "/api/v1/jobs/", request_headers, json_body(body)

    return {"list": (job_list, 200), "detail": (job_detail, 200), "submit": (submit, 201)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Gunicorn:
    """``python -m gunicorn backend.wsgi`` on a free loopback port, gthread workers."""

    def __init__(
        self,
        workers: int,
        threads: int,
        var_dir: str,
        connections: int | None = None,
        worker_class: str = "gthread",
    ) -> None:
        self.workers, self.threads, self.connections = workers, threads, connections
        self.worker_class = worker_class
        self.port = free_port()
        self.log_path = Path(var_dir) / f"gunicorn-{workers}x{threads}.log"
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        if self.worker_class == "sync":  # one request at a time per process, no keep-alive
            extra = []
        else:
            extra = ["--threads", str(self.threads), "--keep-alive", "30"]
            if self.connections:
                extra += ["--worker-connections", str(self.connections)]
        return [
            sys.executable, "-m", "gunicorn", "backend.wsgi",
            "--config", str(REPO_ROOT / "deploy" / "gunicorn.conf.py"),
            "--bind", f"127.0.0.1:{self.port}",
            "--workers", str(self.workers),
            "--worker-class", self.worker_class,
            "--log-level", "warning",
            *extra,
        ]  # fmt: skip

    def __enter__(self) -> Gunicorn:
        log = self.log_path.open("w")
        self.process = subprocess.Popen(
            self.command(), cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env=os.environ
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"gunicorn did not answer /healthz in 60 s; see {self.log_path}")

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except OSError:
        return []


def _database_pids() -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in ("mariadbd", "mysqld"):
                pids.append(int(comm.parent.name))
        except OSError:
            continue
    return pids


def _cpu_snapshot(server_pid: int) -> dict[str, float]:
    return {
        "app": sum(_cpu_seconds(pid) for pid in [server_pid, *_children(server_pid)]),
        "database": sum(_cpu_seconds(pid) for pid in _database_pids()),
        "client": _cpu_seconds(os.getpid()),
    }


def _idle_seconds() -> float:
    """Idle time of all CPUs so far, from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def run_load(args, personas: list[Persona], config: tuple[int, ...], names: list[str]):
    """Each scenario in turn against one server; with CPU ms per request by process group."""
    from bench.api_latency.load import run_scenario
    from bench.api_latency.wrk_load import run_scenario_wrk

    makers = scenario_requests(personas)
    results = []
    with Gunicorn(*config[:2], args.var_dir, *config[2:], worker_class=args.worker_class) as server:
        for name in names:
            make_request, expected = makers[name]
            before, idle_before = _cpu_snapshot(server.process.pid), _idle_seconds()
            started = time.perf_counter()
            if args.load_generator == "wrk":
                result = run_scenario_wrk(
                    name,
                    server.port,
                    make_request,
                    clients=args.clients,
                    seconds=args.seconds,
                    warmup_seconds=args.warmup_seconds,
                )
            else:
                result = run_scenario(
                    name,
                    server.port,
                    make_request,
                    expected,
                    clients=args.clients,
                    requests=args.requests,
                    warmup=args.warmup,
                )
            wall = time.perf_counter() - started
            after, idle_after = _cpu_snapshot(server.process.pid), _idle_seconds()
            sent = (
                result.requests + args.warmup
                if args.load_generator == "python"
                else result.requests  # wrk's warm-up is not counted; it is short
            )
            used = {group: after[group] - before[group] for group in after}
            busy = (os.cpu_count() or 1) * wall - (idle_after - idle_before)
            result.cpu_ms_per_request = {
                group: round(seconds / sent * 1000, 2) for group, seconds in used.items()
            }
            # CPUs that whatever else ran on the machine kept busy meanwhile: other work on a
            # shared machine skews the figures, so it is recorded with them.
            result.cpu_ms_per_request["other_cpus_busy"] = round(
                max(0.0, busy - sum(used.values())) / wall, 2
            )
            results.append(result)
    return results


def print_table(title: str, results) -> None:
    print(f"\n{title}")
    header = (
        f"{'scenario':<10}{'requests':>9}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}"
        f"{'p99 ms':>9}{'errors':>8}   CPU ms/request: app, db, client; other CPUs busy"
    )
    print(header)
    print("-" * len(header))
    for result in results:
        row = result.summary()
        cpu = result.cpu_ms_per_request
        print(
            f"{row['scenario']:<10}{row['requests']:>9}{row['throughput_rps']:>9.1f}"
            f"{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}{row['p99_ms']:>9.1f}{row['errors']:>8}"
            f"   {cpu.get('app', 0):.1f}, {cpu.get('database', 0):.1f}, {cpu.get('client', 0):.1f};"
            f" {cpu.get('other_cpus_busy', 0):.2f}"
        )
    for result in results:
        for sample in result.error_samples[:3]:
            print(f"  {result.name} error: {sample}")


def profile(personas: list[Persona], names: list[str], count: int) -> None:
    """Send requests through Django's test client with cProfile on; print the hot spots."""
    import cProfile
    import pstats

    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    makers = scenario_requests(personas)
    client = Client(HTTP_HOST="127.0.0.1")
    for name in names:
        make_request, expected = makers[name]
        rng = random.Random(11)

        def send(rng=rng, make_request=make_request, expected=expected):
            method, path, headers, body = make_request(rng)
            extra = {"HTTP_AUTHORIZATION": headers["Authorization"]}
            if method == "GET":
                response = client.get(path, **extra)
            else:
                response = client.post(path, body, content_type="application/json", **extra)
            assert response.status_code == expected, (response.status_code, response.content)
            return response

        for _ in range(20):
            send()
        with CaptureQueriesContext(connection) as queries:
            send()
        print(f"\n=== {name}: {len(queries.captured_queries)} queries per request")
        for query in queries.captured_queries:
            print(f"  {query['time']}s {query['sql'][:160]}")
        cpu_started = time.process_time()
        for _ in range(count):
            send()
        cpu = (time.process_time() - cpu_started) / count * 1000
        print(f"=== {name}: {cpu:.2f} ms of this process's CPU per request (not profiled)")
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for _ in range(count):
            send()
        profiler.disable()
        elapsed = (time.perf_counter() - started) / count * 1000
        print(f"=== {name}: {elapsed:.2f} ms per request in-process (profiled)")
        order = os.environ.get("BENCH_PROFILE_SORT", "cumulative")  # or tottime
        pstats.Stats(profiler).sort_stats(order).print_stats(
            os.environ.get("BENCH_PROFILE_FILTER", ""), 30
        )


def median_rows(runs: list[dict]) -> list[dict]:
    """Per scenario, the median of each figure over repeated runs of one configuration."""
    by_scenario: dict[str, list[dict]] = {}
    for run in runs:
        for row in run["scenarios"]:
            by_scenario.setdefault(row["scenario"], []).append(row)
    figures = ("throughput_rps", "p50_ms", "p95_ms", "p99_ms")
    return [
        {"scenario": name, "runs": len(rows), "errors": sum(row["errors"] for row in rows)}
        | {figure: round(statistics.median(row[figure] for row in rows), 1) for figure in figures}
        for name, rows in by_scenario.items()
    ]


def _without_password(database_url: str) -> str:
    url = urlparse(database_url)
    return f"{url.scheme}://{url.username or ''}@{url.hostname}:{url.port or 3306}{url.path}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    database_url = args.database_url or DEFAULT_DATABASE_URL
    configure_django(database_url, args.var_dir)
    names = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    dataset = prepare_data(args.refill)
    print(f"Data set: {dataset}", flush=True)
    personas = make_personas(PERSONAS)
    if args.profile:
        profile(personas, names, args.profile)
        return 0

    configs = [(args.workers, args.threads, args.worker_connections)]
    if args.sweep:
        configs = [tuple(int(n) for n in item.split("x")) for item in args.sweep.split(",")]
    runs = []
    for config in [config for config in configs for _ in range(args.repeat)]:
        workers, threads = config[:2]
        connections = config[2] if len(config) > 2 and config[2] else None
        forget_submitted_jobs()
        results = run_load(args, personas, (workers, threads, connections), names)
        if args.worker_class == "sync":
            server = f"gunicorn sync, {workers} workers"
        else:
            server = f"gunicorn gthread, {workers} workers x {threads} threads" + (
                f", {connections} connections per worker" if connections else ""
            )
        if args.load_generator == "wrk":
            load = f"wrk, {args.clients} connections, {args.seconds} s per scenario"
        else:
            load = f"Python client, {args.clients} threads, {args.requests} requests per scenario"
        print_table(f"{server}; load: {load}", results)
        runs.append(
            {
                "gunicorn": {
                    "worker_class": args.worker_class,
                    "workers": workers,
                    "threads": threads,
                    "worker_connections": connections,
                },
                "load_generator": args.load_generator,
                "scenarios": [result.summary() for result in results],
            }
        )
    # One configuration: the goal is judged on the median of its repeated runs.
    final = median_rows(runs) if len(configs) == 1 else None
    goal_met = final is not None and all(
        row["p95_ms"] < GOAL_P95_MS and row["errors"] == 0 for row in final
    )
    runs_meeting_goal = sum(
        all(row["p95_ms"] < GOAL_P95_MS and row["errors"] == 0 for row in run["scenarios"])
        for run in runs
    )
    report = {
        "benchmark": "api_latency",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "database": _without_password(database_url),
        "dataset": dataset,
        "clients": args.clients,
        "load_generator": args.load_generator,
        "requests_per_scenario": args.requests if args.load_generator == "python" else None,
        "seconds_per_scenario": args.seconds if args.load_generator == "wrk" else None,
        "goal_p95_ms": GOAL_P95_MS,
        "goal_met": goal_met if final is not None else None,
        "median": final,
        "runs_meeting_goal": runs_meeting_goal,
        "runs": runs,
    }
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nWrote {output}")
    if final is not None:
        print(f"\nMedian of {args.repeat} runs:")
        print(f"{'scenario':<10}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}")
        for row in final:
            print(
                f"{row['scenario']:<10}{row['throughput_rps']:>9.1f}{row['p50_ms']:>9.1f}"
                f"{row['p95_ms']:>9.1f}{row['p99_ms']:>9.1f}{row['errors']:>8}"
            )
        print(
            f"Goal (median p95 < {GOAL_P95_MS:.0f} ms for each, no errors): "
            f"{'met' if goal_met else 'NOT met'}; {runs_meeting_goal} of {len(runs)} runs "
            "met it on their own"
        )
    errors = sum(row["errors"] for run in runs for row in run["scenarios"])
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
