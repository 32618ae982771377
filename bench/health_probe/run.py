"""Probes under a burst: /healthz on the web port against the health server's.

    .venv/bin/python -m bench.health_probe.run [--connections 1000] [--seconds 20]

Starts a MariaDB of its own (tests/fault_servers.py) with one user and 500 jobs, gunicorn
with ``deploy/gunicorn.conf.py`` (its sync workers, and the health server beside them),
then drives ``GET /api/v1/jobs/`` (the first page of 50) from ``--connections`` concurrent
connections with wrk while a probe asks ``/healthz`` on the web port and on the health
server in turn, every half second, as Kubernetes would. Prints both probes' latencies
and their ratio: a probe whose 1 s timeout the web port misses marks the pod unready.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
RESULTS = REPO_ROOT / "bench" / "results" / "health_probe.json"
SEED = """
import django
django.setup()
from backend.accounts.actions import create_api_token
from tests.factories import *
gpu = GpuTypeFactory(name="A100", cpus_per_gpu=4, memory_per_gpu=16 * 1024)
vc = VirtualClusterFactory(name="probe")
QuotaFactory(vc=vc, gpu_type=gpu, gpus=8)
user = UserFactory(username="probe")
MembershipFactory(vc=vc, user=user)
for _ in range(500):
    JobFactory(owner=user, vc=vc, gpu_type=gpu, status="finished")
print(create_api_token(user, "probe")[1])
"""


def probe(url: str) -> float:
    started = time.monotonic()
    try:
        requests.get(url, timeout=60)
    except requests.RequestException:
        return 60.0
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    subprocess.run([str(REPO_ROOT / "deploy" / "install-system-packages.sh"), "wrk"], check=True)
    from tests.fault_servers import MariaDBServer, own_port

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # wrk's connections
    directory = Path(tempfile.mkdtemp(prefix="trainyard-probe-"))
    mariadb = MariaDBServer()
    web = None
    try:
        mariadb.sql("CREATE DATABASE trainyard CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        port = own_port()
        env = os.environ | {
            "DATABASE_URL": mariadb.url("trainyard"),
            "TRAINYARD_VAR_DIR": str(directory / "var"),
            "DJANGO_SETTINGS_MODULE": "backend.settings",
        }
        run = {"cwd": REPO_ROOT, "env": env, "check": True, "capture_output": True}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], **run)
        token = subprocess.run([sys.executable, "-c", SEED], text=True, **run).stdout.split()[-1]
        health_port = own_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "backend.wsgi", "--config",
             "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{port}", "--access-logfile",
             "/dev/null"],
            cwd=REPO_ROOT, env=env | {"TRAINYARD_HEALTH_BIND": f"127.0.0.1:{health_port}"},
            start_new_session=True,
        )  # fmt: skip
        base, health = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{health_port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if probe(f"{base}/healthz") < 1 and probe(f"{health}/livez") < 1:
                break
            time.sleep(0.5)
        load = subprocess.Popen(
            ["wrk", "-t", "2", "-c", str(args.connections), "-d", f"{args.seconds}s",
             "--timeout", "60s", "-H", f"Authorization: Token {token}",
             f"{base}/api/v1/jobs/"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        samples: dict[str, list[float]] = {"web": [], "health": []}
        stop = time.monotonic() + args.seconds - 2
        time.sleep(2)  # the burst fills the workers' queue first

        def sample(name: str, url: str) -> None:
            while time.monotonic() < stop:
                samples[name].append(probe(url))
                time.sleep(0.5)

        threads = [
            threading.Thread(target=sample, args=("web", f"{base}/healthz")),
            threading.Thread(target=sample, args=("health", f"{health}/healthz")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wrk_output = load.communicate(timeout=args.seconds + 120)[0]
        result = {
            "connections": args.connections,
            "web_p50_s": round(statistics.median(samples["web"]), 3),
            "web_max_s": round(max(samples["web"]), 3),
            "health_p50_s": round(statistics.median(samples["health"]), 4),
            "health_max_s": round(max(samples["health"]), 4),
            "web_over_1s": sum(latency >= 1 for latency in samples["web"]),
            "probes": len(samples["web"]),
        }
        result["ratio_p50"] = round(result["web_p50_s"] / result["health_p50_s"], 1)
        print(wrk_output)
        print(f"{'probe':<22} {'p50 s':>8} {'max s':>8}")
        print(
            f"{'/healthz, web port':<22} {result['web_p50_s']:>8} {result['web_max_s']:>8}"
            f"  ({result['web_over_1s']} of {result['probes']} past a 1 s timeout)"
        )
        print(
            f"{'/healthz, health port':<22} {result['health_p50_s']:>8} {result['health_max_s']:>8}"
        )
        print(f"health server faster by {result['ratio_p50']}x (p50)")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2))
    finally:
        if web is not None and web.poll() is None:
            os.killpg(web.pid, signal.SIGKILL)
            web.wait()
        mariadb.close()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
