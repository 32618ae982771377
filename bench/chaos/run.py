"""Chaos: 200 submissions with retries while web, worker, beat, Redis and MariaDB are killed.

    .venv/bin/python -m bench.chaos.run [--jobs 200] [--kill-every 4] [--repeat 1] [--cpu-hogs 2]

Starts a MariaDB and a Redis of its own (ports and data directories as
tests/fault_servers.py picks them: ``TRAINYARD_TEST_PORTS``, ``TRAINYARD_TEST_DIR_PREFIX``)
and the whole system on them under ``manage.py run_trainyard`` (gunicorn, a Celery worker,
beat; the local backend running every job as a real process of its owner's account). Then
clients submit ``--jobs`` one-GPU jobs (``sleep 0.2``) at a steady pace, each retried with
its Idempotency-Key until it is answered 200/201, while every ``--kill-every`` seconds one of
web, worker, beat, Redis, MariaDB (in turn) is killed with SIGKILL: run_trainyard restarts
its children, the bench starts Redis (empty: no persistence) and MariaDB (crash recovery)
again after a second. Once every submission is answered, the kills stop and the jobs get
``--settle`` seconds to end. ``--cpu-hogs N`` runs N processes spinning on the CPU beside
it all the while (the system's start-ups and answers compete with them). Printed, per run:

- acknowledged: submissions answered 200/201 (their job ids);
- lost: acknowledged jobs the database does not hold;
- duplicated: jobs beyond one per Idempotency-Key, or a key answered with two ids;
- stuck: acknowledged jobs not ended (finished) by the end of the settling time;
- how long submitting took: until the last submission was answered;
- after each kill of the web server, the longest a client asking ``/healthz`` through the
  front again and again waited for a 200 (median and slowest over the kills; issue 33's
  goal: within 3 s).

Goal (issue: self-healing under faults): all zero but acknowledged.
"""

from __future__ import annotations

import argparse
import itertools
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
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
RESULTS = REPO_ROOT / "bench" / "results" / "chaos.json"
VICTIMS = ("web", "worker", "beat", "redis", "mariadb")
NODES = 4
SEED = f"""
import django
django.setup()
from backend.accounts.actions import create_api_token
from tests.factories import *
gpu = GpuTypeFactory(name="A100", cpus_per_gpu=4, memory_per_gpu=16 * 1024)
for index in range({NODES}):
    NodeFactory(name=f"a100-{{index}}", gpu_type=gpu, gpus=8, cpus=32, memory=128 * 1024)
vc = VirtualClusterFactory(name="chaos")
QuotaFactory(vc=vc, gpu_type=gpu, gpus={NODES * 8}, cpus={NODES * 32}, memory={NODES * 128 * 1024})
user = UserFactory(username="chaos")
MembershipFactory(vc=vc, user=user)
print(create_api_token(user, "chaos")[1])
"""
JOBS = """
import django, json
django.setup()
from backend.jobs.models import Job
print(json.dumps(list(Job.objects.values_list("job_id", "idempotency_key", "status"))))
"""


def python(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return done.stdout


def child(system: subprocess.Popen, victim: str) -> psutil.Process | None:
    """run_trainyard's web, worker or beat process."""
    for process in psutil.Process(system.pid).children():
        try:
            command = process.cmdline()
        except psutil.Error:
            continue
        if victim == "web" and any("gunicorn" in part for part in command):
            return process
        if "celery" in command and victim in command:
            return process
    return None


def longest_wait_for_200(url: str, killed_at: float, window: float = 8.0) -> float | None:
    """Asking ``url`` again and again from ``killed_at`` for ``window`` seconds, as a client
    that retries would: the longest time from a question to the next 200 (None: none came
    within a minute). A killed gunicorn's workers answer until the supervisor kills them
    too; the wait that matters is the one until the gunicorn started next answers."""
    longest, waiting_since = 0.0, killed_at
    while time.monotonic() - waiting_since < 60:
        try:
            answered_200 = requests.get(url, timeout=60).status_code == 200
        except requests.RequestException:
            answered_200 = False
        if not answered_200:
            time.sleep(0.01)
            continue
        answered_at = time.monotonic()
        longest = max(longest, answered_at - waiting_since)
        if answered_at - killed_at >= window:
            return longest
        waiting_since = answered_at
    return None


class Chaos(threading.Thread):
    """Kills one victim every ``every`` seconds, in turn, until stopped; after each kill of
    the web server, times the longest wait for a 200 of ``health_url`` (through the front)."""

    def __init__(self, system, redis, mariadb, every: float, health_url: str) -> None:
        super().__init__(daemon=True)
        self.system, self.redis, self.mariadb, self.every = system, redis, mariadb, every
        self.health_url = health_url
        self.done = threading.Event()
        self.kills: Counter = Counter()
        self.web_back_seconds: list[float | None] = []
        self.timers: list[threading.Thread] = []

    def time_web_back(self, killed_at: float) -> None:
        def timer() -> None:
            self.web_back_seconds.append(longest_wait_for_200(self.health_url, killed_at))

        self.timers.append(threading.Thread(target=timer, daemon=True))
        self.timers[-1].start()

    def run(self) -> None:
        for victim in itertools.cycle(VICTIMS):
            if self.done.wait(self.every):
                return
            if victim in ("redis", "mariadb"):
                server = self.redis if victim == "redis" else self.mariadb
                server.process.send_signal(signal.SIGKILL)
                server.process.wait(timeout=30)
                time.sleep(1)  # the outage
                server.start()
            else:
                process = child(self.system, victim)
                if process is None:  # still being restarted
                    continue
                process.send_signal(signal.SIGKILL)
                if victim == "web":
                    self.time_web_back(time.monotonic())
            self.kills[victim] += 1


def submit_with_retries(base_url: str, token: str, key: str, deadline: float) -> str | None:
    """The job id once the submission is answered 200/201; None if it never is."""
    body = {"vc": "chaos", "gpu_type": "A100", "command": "sleep 0.2", "gpus_per_worker": 1}
    headers = {"Authorization": f"Token {token}", "Idempotency-Key": key}
    while time.monotonic() < deadline:
        try:
            answer = requests.post(f"{base_url}/api/v1/jobs/", json=body, headers=headers,
                                   timeout=10)  # fmt: skip
            if answer.status_code in (200, 201):
                return answer.json()["id"]
        except requests.RequestException:
            pass
        time.sleep(0.5)
    return None


def cpu_hogs(count: int) -> list[subprocess.Popen]:
    """``count`` processes that spin on the CPU until killed."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]


def one_run(jobs: int, kill_every: float, settle: float, hogs: int = 0) -> dict:
    from tests.fault_servers import MariaDBServer, RedisServer, own_port
    from tests.unix_accounts import TEST_ACCOUNT_ENV

    directory = Path(tempfile.mkdtemp(prefix="trainyard-chaos-"))
    directory.chmod(0o711)  # the jobs' accounts pass through to their directories
    mariadb, redis = MariaDBServer(), RedisServer()
    system = None
    spinning = cpu_hogs(hogs)
    try:
        mariadb.sql("CREATE DATABASE trainyard CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        port = own_port()
        env = (
            os.environ
            | TEST_ACCOUNT_ENV
            | {
                "DATABASE_URL": mariadb.url("trainyard"),
                "REDIS_URL": redis.url,
                "TRAINYARD_VAR_DIR": str(directory / "var"),
                "TRAINYARD_BACKEND": "local",
                "TRAINYARD_LOCAL_CGROUP_ROOT": "",
                "TRAINYARD_LOCAL_KILL_AFTER_SECONDS": "1",
                "TRAINYARD_STOP_GRACE_SECONDS": "2",
                "TRAINYARD_DEPLOY_TIMEOUT_SECONDS": "10",
                "TRAINYARD_JOB_MANAGER_INTERVAL": "1",
                "PYTHONUNBUFFERED": "1",
                "DJANGO_SETTINGS_MODULE": "backend.settings",
            }
        )
        python(env, "manage.py", "migrate", "--noinput", "-v0")
        token = python(env, "-c", SEED).split()[-1]
        log = (directory / "run_trainyard.log").open("w")
        system = subprocess.Popen(
            [sys.executable, "manage.py", "run_trainyard", "--no-demo", "--port", str(port)],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        chaos = Chaos(system, redis, mariadb, kill_every, f"{base_url}/healthz")
        chaos.start()
        keys = [f"chaos-{uuid.uuid4().hex}" for _ in range(jobs)]
        started = time.monotonic()
        give_up = started + 600

        def paced(index_key: tuple[int, str]) -> str | None:
            index, key = index_key
            time.sleep(max(0.0, started + index * 0.2 - time.monotonic()))  # 5 a second
            return submit_with_retries(base_url, token, key, give_up)

        with ThreadPoolExecutor(max_workers=16) as pool:
            answered = list(pool.map(paced, enumerate(keys)))
        chaos.done.set()
        chaos.join()
        for timer in chaos.timers:
            timer.join()
        submitted_s = time.monotonic() - started
        acknowledged = {key: job for key, job in zip(keys, answered, strict=True) if job}
        settle_until = time.monotonic() + settle
        while True:
            rows = json.loads(python(env, "-c", JOBS))
            status = {job_id: state for job_id, _, state in rows}
            open_jobs = [j for j in acknowledged.values() if status.get(j) != "finished"]
            if not open_jobs or time.monotonic() > settle_until:
                break
            time.sleep(2)
        per_key = Counter(key for _, key, _ in rows if key)
        result = {
            "submissions": jobs,
            "acknowledged": len(acknowledged),
            "lost": sum(job not in status for job in acknowledged.values()),
            "duplicated": sum(count - 1 for count in per_key.values() if count > 1),
            "stuck": len(open_jobs),
            "stuck_statuses": dict(Counter(status.get(j, "missing") for j in open_jobs)),
            "kills": dict(chaos.kills),
            "cpu_hogs": hogs,
            "submit_phase_s": round(submitted_s, 1),
            "web_back_s": [
                None if back is None else round(back, 2) for back in chaos.web_back_seconds
            ],
            "restarts_logged": (directory / "run_trainyard.log").read_text().count("restarted"),
        }
        return result
    finally:
        for hog in spinning:
            hog.kill()
            hog.wait()
        if system is not None and system.poll() is None:
            system.send_signal(signal.SIGINT)
            try:
                system.wait(timeout=60)
            except subprocess.TimeoutExpired:
                system.kill()
        for leftover in psutil.process_iter(["cmdline"]):  # jobs' inits, by their directory
            if any(str(directory) in part for part in leftover.info["cmdline"] or []):
                leftover.kill()
        redis.close()
        mariadb.close()
        shutil.rmtree(directory, ignore_errors=True)


def web_back(seconds: list[float | None]) -> str:
    """The longest waits for a 200 after web kills: median and slowest, or what never came."""
    if not seconds:
        return "no web kill"
    if None in seconds:
        return f"{seconds.count(None)} of {len(seconds)} never within 60 s"
    return f"median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kill-every", type=float, default=4.0)
    parser.add_argument("--settle", type=float, default=180.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cpu-hogs", type=int, default=0, help="processes spinning beside it")
    args = parser.parse_args()
    runs = []
    print(f"{'run':>3} {'acknowledged':>12} {'lost':>5} {'duplicated':>10} {'stuck':>5}  kills")
    for number in range(1, args.repeat + 1):
        result = one_run(args.jobs, args.kill_every, args.settle, args.cpu_hogs)
        runs.append(result)
        kills = ", ".join(f"{victim} {count}" for victim, count in result["kills"].items())
        print(
            f"{number:>3} {result['acknowledged']:>12} {result['lost']:>5} "
            f"{result['duplicated']:>10} {result['stuck']:>5}  {kills}"
            f"  (submitted in {result['submit_phase_s']} s; stuck: {result['stuck_statuses']}; "
            f"longest wait for a 200 after a web kill -9: {web_back(result['web_back_s'])})",
            flush=True,
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
