"""Local backend latency: submit to running, and kill to resources free, for 100 small jobs.

    .venv/bin/python -m bench.local_latency.run [--jobs 100] [--nodes 16] [--sandbox none,runc]

Starts the whole embedded system as ``make run`` does (``manage.py run_trainyard``: gunicorn,
a Celery worker, beat and an embedded Redis, the local backend running real processes) on
a fresh SQLite database with an idle declared cluster, then, one job at a time:

- submit-to-running: ``POST /api/v1/jobs/`` until the job's ``started_at`` is set, i.e. the
  job manager has placed it and the backend has started its process;
- kill-to-free: ``POST .../kill/`` until the job is ``killed``, i.e. its process is gone and
  its GPUs are free again.

Both are measured by the client's clock around the API calls, polling the job every 10 ms.
Goal (issue: cluster backends): p95 submit-to-running under 2 s; with the runc sandbox
(issue 29), under 0.5 s. ``--sandbox none,runc`` runs the whole measurement once per
sandbox, side by side in one run (the runc one on a bridge and /24 of 10.88.0.0/16 of its
own, removed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from jobmanager.backends.sandbox import remove_cgroup_parent, remove_runtime_dir
from jobmanager.backends.sandbox_net import BridgeNetwork

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS = REPO_ROOT / "bench" / "results" / "local_latency.json"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(name: str, seconds: list[float]) -> dict[str, float | str]:
    return {
        "measure": name,
        "jobs": len(seconds),
        "p50_s": round(statistics.median(seconds), 3),
        "p95_s": round(percentile(seconds, 0.95), 3),
        "max_s": round(max(seconds), 3),
        "mean_s": round(statistics.fmean(seconds), 3),
    }


def manage(env: dict[str, str], *arguments: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


SETUP = """
from decimal import Decimal
from backend.accounts.actions import create_api_token
from backend.clusters.models import GpuType, Node
from backend.vcs.models import Membership, Quota, Role, VirtualCluster
from django.contrib.auth import get_user_model
a100 = GpuType.objects.create(name="A100", cpus_per_gpu=Decimal(1), memory_per_gpu=1024)
for index in range({nodes}):
    Node.objects.create(name=f"bench-{{index:02}}", gpu_type=a100, gpus=8, cpus=16, memory=16384)
vc = VirtualCluster.objects.create(name="bench")
Quota.objects.create(
    vc=vc, gpu_type=a100, gpus={nodes} * 8, cpus={nodes} * 16, memory={nodes} * 16384
)
user = get_user_model().objects.create_user("bench")
Membership.objects.create(vc=vc, user=user, role=Role.MEMBER)
print(create_api_token(user, "bench")[1])
"""


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=16, help="declared nodes of 8 GPUs")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--sandbox", default="none", help="none, runc, or both: none,runc")
    args = parser.parse_args(argv)

    results: list[dict[str, float | str]] = []
    for sandbox in args.sandbox.split(","):
        for row in measure(args, sandbox):
            results.append(row | {"sandbox": sandbox})
    header = f"{'sandbox':<9}{'measure':<20}{'jobs':>6}{'p50 s':>9}{'p95 s':>9}{'max s':>9}"
    print(header + f"{'mean s':>9}")
    for row in results:
        print(
            f"{row['sandbox']:<9}{row['measure']:<20}{row['jobs']:>6}{row['p50_s']:>9}"
            f"{row['p95_s']:>9}{row['max_s']:>9}{row['mean_s']:>9}"
        )
    for row in results:
        if row["measure"] == "submit to running":
            goal = 0.5 if row["sandbox"] == "runc" else 2.0
            met = float(row["p95_s"]) < goal
            print(f"{row['sandbox']}: goal p95 submit-to-running < {goal} s: "
                  f"{'met' if met else 'NOT met'}")  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"results": results, "jobs": args.jobs}, indent=2))
    return 0


def measure(args: argparse.Namespace, sandbox: str) -> list[dict[str, float | str]]:
    """Submit-to-running and kill-to-free of ``args.jobs`` jobs, one at a time, on a fresh
    embedded system whose local backend runs with ``sandbox``."""
    var_dir = Path(tempfile.mkdtemp(prefix="trainyard-local-bench-"))
    network = {
        "TRAINYARD_LOCAL_SANDBOX_BRIDGE": f"tyb{secrets.token_hex(4)}",
        "TRAINYARD_LOCAL_SANDBOX_SUBNET": f"10.88.{secrets.randbelow(254) + 1}.0/24",
        "TRAINYARD_LOCAL_SANDBOX_EGRESS_NAT": "false",
    }
    env = (
        {
            key: value
            for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "REDIS_URL")
        }
        | {
            "TRAINYARD_VAR_DIR": str(var_dir),
            "TRAINYARD_BACKEND": "local",
            "TRAINYARD_LOG_LEVEL": "WARNING",
            "TRAINYARD_STOP_GRACE_SECONDS": "5",
            "TRAINYARD_LOCAL_SANDBOX": sandbox,
        }
        | network
    )
    manage(env, "migrate", "--verbosity", "0")
    token = manage(env, "shell", "-c", SETUP.format(nodes=args.nodes)).strip().splitlines()[-1]
    system = subprocess.Popen(
        [sys.executable, "manage.py", "run_trainyard", "--no-demo", "--port", str(args.port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{args.port}/api/v1"
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"

    def job(job_id: str) -> dict:
        return session.get(f"{base}/jobs/{job_id}/", timeout=10).json()

    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{args.port}/healthz"), 120, "the web server")
        body: dict[str, str | int] = {
            "vc": "bench",
            "gpu_type": "A100",
            "command": "sleep 600",
            "gpus_per_worker": 1,
        }
        to_running: list[float] = []
        ids: list[str] = []
        for number in range(args.jobs):
            began = time.monotonic()
            answer = session.post(f"{base}/jobs/", json=body, timeout=10)
            answer.raise_for_status()
            job_id = answer.json()["id"]
            wait_for(lambda job_id=job_id: job(job_id)["started_at"], 60, f"job {job_id} to run")
            to_running.append(time.monotonic() - began)
            ids.append(job_id)
            print(
                f"\r{sandbox}: submit to running: {number + 1}/{args.jobs}", end="", file=sys.stderr
            )
        print(file=sys.stderr)
        to_free: list[float] = []
        for number, job_id in enumerate(ids):
            began = time.monotonic()
            session.post(f"{base}/jobs/{job_id}/kill/", json={}, timeout=10).raise_for_status()
            wait_for(
                lambda job_id=job_id: job(job_id)["status"] == "killed", 60, f"{job_id} killed"
            )
            to_free.append(time.monotonic() - began)
            print(f"\r{sandbox}: kill to free: {number + 1}/{args.jobs}", end="", file=sys.stderr)
        print(file=sys.stderr)
    finally:
        os.killpg(system.pid, signal.SIGTERM)
        system.wait(timeout=60)
        if sandbox != "none":
            BridgeNetwork(
                network["TRAINYARD_LOCAL_SANDBOX_BRIDGE"],
                network["TRAINYARD_LOCAL_SANDBOX_SUBNET"], egress_nat=False,
            ).tear_down()  # fmt: skip
            remove_cgroup_parent(var_dir / "local-backend")
            remove_runtime_dir(var_dir / "local-backend")
    return [summary("submit to running", to_running), summary("kill to free", to_free)]


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


if __name__ == "__main__":
    sys.exit(main())
