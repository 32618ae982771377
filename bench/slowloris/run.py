"""Slowloris against the web tier: gunicorn alone (the setup before the front) and nginx in
front of it (backend/core/front.py, as make run and the deployment serve it), in one run.

    .venv/bin/python -m bench.slowloris.run [--connections 1000] [--seconds 20]

For each setup: a scratch SQLite database with one user and an API token, gunicorn with
``deploy/gunicorn.conf.py`` (its sync workers, WEB_CONCURRENCY or twice the cores up to
8), then ``--connections`` slowloris connections (bench/slowloris/slow_clients.py: a header
line every 5 s, never the end of the headers), half from a process run as a job's account
(``ty-test-alice``, as root) and half from this one's, all to 127.0.0.1; once they are
open, 4 clients call ``GET /api/v1/me/`` in a loop for ``--seconds`` (5 s timeout each).
Prints p50/p95/max and errors of those calls for both setups, and their ratio, then the
same calls through the front without the attack (what the machine gives them anyway).
Everything it starts is stopped at the end, and the whole run is bounded (about 3 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
RESULTS = REPO_ROOT / "bench" / "results" / "slowloris.json"
CLIENTS = 4
CLIENT_TIMEOUT = 5.0
SEED = """
import django
django.setup()
from backend.accounts.actions import create_api_token
from tests.factories import UserFactory
print(create_api_token(UserFactory(username="alice"), "slowloris")[1])
"""


def stop(process: subprocess.Popen) -> None:
    """Kill a server and its process group, then reap it."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


@contextmanager
def web_tier(env: dict[str, str], front: bool) -> Iterator[int]:
    """gunicorn alone on a loopback port, or behind the front; yields the clients' port."""
    from tests.fault_servers import own_port

    port = own_port()
    bind = f"127.0.0.1:{port}"
    upstream = f"unix:{env['TRAINYARD_VAR_DIR']}/run/gunicorn.sock" if front else bind
    commands = [
        [
            sys.executable,
            "-m",
            "gunicorn",
            "backend.wsgi",
            "--config",
            "deploy/gunicorn.conf.py",
            "--bind",
            upstream,
            "--access-logfile",
            "/dev/null",
        ]
    ]
    if front:
        commands.append([sys.executable, "-m", "backend.core.front", bind, "--upstream", upstream])
    processes = [
        subprocess.Popen(command, cwd=REPO_ROOT, env=env, start_new_session=True)
        for command in commands
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not answers(f"http://{bind}/healthz"):
            if time.monotonic() > deadline:
                raise RuntimeError("the web tier did not answer /healthz within 60 s")
            time.sleep(0.2)
        yield port
    finally:
        for process in processes:
            stop(process)


def slowloris(stack: ExitStack, port: int, connections: int, seconds: float) -> None:
    """``connections`` slow requests to ``port``, a header line every 5 s, held until
    ``stack`` closes: half from a job's account when this runs as root."""
    from tests.backend.front_support import slow_clients
    from tests.unix_accounts import job_account

    tenant = connections // 2 if os.geteuid() == 0 else 0
    if tenant:
        stack.enter_context(slow_clients(port, tenant, job_account("alice"), 5, seconds))
    stack.enter_context(slow_clients(port, connections - tenant, None, 5, seconds))


def clients(port: int, token: str, seconds: float) -> tuple[list[float], int]:
    """``CLIENTS`` loops of ``GET /api/v1/me/`` for ``seconds``: the successful calls'
    latencies and the number of failed ones (timeouts, refusals, non-200)."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    url = f"http://127.0.0.1:{port}/api/v1/me/"

    def loop() -> None:
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                ok = (
                    requests.get(
                        url, headers={"Authorization": f"Token {token}"}, timeout=CLIENT_TIMEOUT
                    ).status_code
                    == 200
                )
            except requests.RequestException:
                ok = False
            with lock:
                if ok:
                    latencies.append(time.monotonic() - started)
                else:
                    errors[0] += 1

    threads = [threading.Thread(target=loop) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors[0]


def summary(latencies: list[float], errors: int) -> dict[str, float | int | None]:
    if len(latencies) < 2:
        return {"calls": len(latencies), "errors": errors, "p50_ms": None, "p95_ms": None,
                "max_ms": round(max(latencies) * 1000) if latencies else None}  # fmt: skip
    cuts = statistics.quantiles(latencies, n=20)
    return {
        "calls": len(latencies),
        "errors": errors,
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p95_ms": round(cuts[18] * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="trainyard-slowloris-"))
    directory.chmod(0o711)
    results = {}
    try:
        env = os.environ | {
            "DATABASE_URL": f"sqlite:///{directory / 'bench.sqlite3'}",
            "TRAINYARD_VAR_DIR": str(directory / "var"),
            "TRAINYARD_HEALTH_BIND": "",
            "DJANGO_SETTINGS_MODULE": "backend.settings",
        }
        run: dict[str, Any] = {"cwd": REPO_ROOT, "env": env, "check": True, "capture_output": True}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], **run)
        token = subprocess.run([sys.executable, "-c", SEED], text=True, **run).stdout.split()[-1]
        setups = (("gunicorn alone", False, True), ("nginx front", True, True),
                  ("front, no attack", True, False))  # fmt: skip
        for name, front, attacked in setups:
            with ExitStack() as stack:
                port = stack.enter_context(web_tier(env, front))
                if attacked:
                    slowloris(stack, port, args.connections, args.seconds + 30)
                results[name] = summary(*clients(port, token, args.seconds))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"{args.connections} slowloris connections, {CLIENTS} clients of GET /api/v1/me/")
    print(f"{'setup':<16} {'calls':>6} {'errors':>7} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, row in results.items():
        cells = [str("-" if row[key] is None else row[key]) for key in
                 ("calls", "errors", "p50_ms", "p95_ms", "max_ms")]  # fmt: skip
        print(f"{name:<16} {cells[0]:>6} {cells[1]:>7} {cells[2]:>8} {cells[3]:>8} {cells[4]:>8}")
    alone, fronted = results["gunicorn alone"], results["nginx front"]
    if alone["p95_ms"] and fronted["p95_ms"]:
        print(f"p95: gunicorn alone / nginx front = {alone['p95_ms'] / fronted['p95_ms']:.1f}x")
    else:
        print(
            f"gunicorn alone answered {alone['calls']} calls ({alone['errors']} failed after "
            f"{CLIENT_TIMEOUT:g} s); the front {fronted['calls']} ({fronted['errors']} failed)"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"connections": args.connections} | results, indent=2))


if __name__ == "__main__":
    main()
