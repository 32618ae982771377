"""Start-up time of every entry point, beside a bare Django + DRF project (issue 33).

    .venv/bin/python -m bench.startup.run [--repeat 10] [--only NAME]

Each entry point is started ``--repeat`` times (after one start that warms the caches,
bytecode included: the children may write it whatever this environment says) and timed from
the exec to the moment it is ready: a management command or the CLI to its exit; gunicorn
(one sync worker; again with the app preloaded, as ``make run`` starts it: with
``deploy/gunicorn.conf.py`` for Trainyard, ``--preload`` for the peer) to its first ``200``
of ``/healthz``; a Celery worker (without mingle, as ``make run`` starts it) to the end of
its first task (``celery.backend_cleanup``, queued before it starts); beat to its scheduler
started (``beat: Starting...``: the app and its tasks loaded); the SSH gateway to its first
accepted connection (its SSH banner), the endpoint proxy beside it to its first HTTP
answer. Besides the wall time, the CPU time (user + system) its processes had used by then:
a command's from ``wait4``, a server's summed over its process group from ``/proc`` at the
moment it is ready; on a machine shared with other work the CPU time is the steadier
figure. Printed: the medians and the slowest wall time, the same for a bare ``django-admin
startproject`` with DRF and Celery of the same versions started the same way (generated in
a temporary directory), the ratios, and the five modules of the ``python -X importtime``
output that took longest on their own; the load average before and after. ``--only`` keeps
the entry points whose name has NAME. Both projects use SQLite and a Redis of their own;
the numbers go to ``bench/results/startup.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.startup.projects import BIN, REPO_ROOT, Project, bare, trainyard

RESULTS = REPO_ROOT / "bench" / "results" / "startup.json"
GIVE_UP_SECONDS = 120.0
Probe = Callable[[], bool]


@dataclass
class EntryPoint:
    """How to start one entry point in a project, and when it is ready.

    ``argv`` starts with the Python arguments (the interpreter itself is added, with
    ``-X importtime`` for the profile). ``ready`` is empty for a command that is ready when
    it exits; otherwise each probe names a moment to time (the first one also ends the run
    when there is only one)."""

    name: str
    argv: list[str]
    ready: dict[str, Callable[[Path], Probe]] = field(default_factory=dict)
    before: Callable[[], None] | None = None  # run before each start, untimed


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers_200(url: str) -> Callable[[Path], Probe]:
    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.HTTPError):
            return False

    return lambda log: probe


def answers_http(url: str) -> Callable[[Path], Probe]:
    """Any HTTP answer at all (the endpoint proxy answers 4xx to a request for nothing)."""

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    return lambda log: probe


def ssh_banner(port: int) -> Callable[[Path], Probe]:
    def probe() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
                return connection.recv(8).startswith(b"SSH-")
        except OSError:
            return False

    return lambda log: probe


def logged(pattern: str) -> Callable[[Path], Probe]:
    regex = re.compile(pattern)
    return lambda log: lambda: bool(regex.search(log.read_text(errors="replace")))


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(group: int) -> float:
    """User + system CPU seconds so far of every process in a process group (with the
    children they reaped), from ``/proc``: a server is timed while it still runs."""
    total_ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:  # state, ppid, pgrp, ... utime is the 12th
                total_ticks += sum(int(value) for value in fields[11:15])
    return total_ticks / CLOCK_TICKS


def wait_with_usage(process: subprocess.Popen, timeout: float) -> tuple[int, float]:
    """Wait for a child; its exit code and the CPU seconds it and its children used."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return process.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(process.args, timeout)
        time.sleep(0.002)


@dataclass
class Start:
    """One start: wall seconds from the exec to each moment, and CPU seconds by then."""

    seconds: dict[str, float]
    cpu_seconds: dict[str, float]


def start_once(project: Project, entry: EntryPoint, log: Path, profile: bool) -> Start:
    """Start the entry point once; seconds from the exec to each moment it names."""
    if entry.before is not None:
        entry.before()
    python = [sys.executable, "-X", "importtime"] if profile else [sys.executable]
    with log.open("w") as sink:
        started = time.monotonic()
        process = subprocess.Popen(
            python + entry.argv, cwd=project.directory, env=project.env, stdout=sink,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            if not entry.ready:
                code, cpu = wait_with_usage(process, GIVE_UP_SECONDS)
                elapsed = time.monotonic() - started
                if code != 0:
                    raise RuntimeError(f"{entry.name}: exit {code}\n{log.read_text()[-2000:]}")
                return Start({entry.name: elapsed}, {entry.name: cpu})
            probes = {name: make(log) for name, make in entry.ready.items()}
            moments: dict[str, float] = {}
            cpu_by_moment: dict[str, float] = {}
            while len(moments) < len(probes):
                for name, probe in probes.items():
                    if name not in moments and probe():
                        moments[name] = time.monotonic() - started
                        cpu_by_moment[name] = group_cpu_seconds(process.pid)
                if process.poll() is not None or time.monotonic() - started > GIVE_UP_SECONDS:
                    raise RuntimeError(f"{entry.name}: not ready\n{log.read_text()[-2000:]}")
                time.sleep(0.005)
            return Start(moments, cpu_by_moment)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def slowest_imports(log: Path, count: int = 5) -> list[tuple[str, float]]:
    """The modules of an ``-X importtime`` log that took longest on their own (ms)."""
    own: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|(\s*)(\S+)", line)
        if match:
            own[match[3]] = own.get(match[3], 0) + int(match[1]) / 1000
    return sorted(own.items(), key=lambda item: -item[1])[:count]


def entry_points(project: Project, workdir: Path, token: str, web_url: str) -> list[EntryPoint]:
    """Each entry point as this project starts it (its own ports, queue and files)."""
    package, is_trainyard = project.package, project.package == "backend"
    port = free_port()
    queue_task = [sys.executable, "-c", f"from {package}.celery import app; "
                  "app.send_task('celery.backend_cleanup')"]  # fmt: skip

    def queue_one_task() -> None:
        subprocess.run(queue_task, cwd=project.directory, env=project.env, check=True, timeout=60)

    points = [
        EntryPoint("python -c pass", ["-c", "pass"]),
        EntryPoint("manage.py check", ["manage.py", "check"]),
        EntryPoint(
            "manage.py issue_token",
            ["manage.py", "issue_token", "alice"]
            if is_trainyard
            else ["manage.py", "drf_create_token", "alice"],
        ),
        EntryPoint(
            "gunicorn: first 200",
            ["-m", "gunicorn", f"{package}.wsgi", "--workers", "1", "--bind", f"127.0.0.1:{port}"],
            {"gunicorn: first 200": answers_200(f"http://127.0.0.1:{port}/healthz")},
        ),
        EntryPoint(
            # As make run starts it, and restarts it after a crash: the app loaded before the
            # worker is forked (Trainyard's configuration, its health server left out).
            "gunicorn preloaded: first 200",
            ["-m", "gunicorn", f"{package}.wsgi", "--workers", "1", "--bind", f"127.0.0.1:{port}"]
            + (["--config", "deploy/gunicorn.conf.py"] if is_trainyard else ["--preload"]),
            {"gunicorn preloaded: first 200": answers_200(f"http://127.0.0.1:{port}/healthz")},
        ),
        EntryPoint(
            "celery worker: first task",
            [
                "-m",
                "celery",
                "-A",
                package,
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
                "--hostname",
                f"bench-{port}@%h",
                "--without-mingle",  # as make run starts it
            ],
            {"celery worker: first task": logged(r"celery\.backend_cleanup\[\S+\] succeeded")},
            before=queue_one_task,
        ),
        EntryPoint(
            "celery beat: scheduler started",
            [
                "-m",
                "celery",
                "-A",
                package,
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(workdir / f"{package}-beat-schedule"),
            ],
            {"celery beat: scheduler started": logged(r"beat: Starting\.\.\.")},
            before=lambda: [path.unlink() for path in workdir.glob(f"{package}-beat-schedule*")],
        ),
    ]
    if is_trainyard:
        ssh, proxy = free_port(), free_port()
        project.env |= {"TRAINYARD_ENDPOINTS_PORT": str(proxy), "TRAINYARD_URL": web_url,
                        "TRAINYARD_TOKEN": token}  # fmt: skip
        cli = str(BIN / "trainyard")
        points += [
            EntryPoint("trainyard --help", [cli, "--help"]),
            EntryPoint("trainyard jobs", [cli, "jobs"]),
            EntryPoint(
                "ssh gateway: first connection",
                ["-m", "backend.gateway", "--listen", "127.0.0.1", "--port", str(ssh)],
                {
                    "ssh gateway: first connection": ssh_banner(ssh),
                    "endpoint proxy: first answer": answers_http(f"http://127.0.0.1:{proxy}/"),
                },
            ),
        ]
    return points


def measure(project: Project, points: list[EntryPoint], workdir: Path, repeat: int) -> dict:
    """Per moment: every start's wall and CPU seconds, and the slowest imports of a
    profiled start."""
    results: dict[str, dict] = {}
    log = workdir / f"{project.package}.log"
    for entry in points:
        start_once(project, entry, log, profile=False)  # caches warm, files made
        runs = [start_once(project, entry, log, profile=False) for _ in range(repeat)]
        start_once(project, entry, log, profile=True)
        for moment in runs[0].seconds:
            results[moment] = {
                "seconds": [run.seconds[moment] for run in runs],
                "cpu_seconds": [run.cpu_seconds[moment] for run in runs],
                "imports": slowest_imports(log),
            }
        print(f"  {project.name}: {entry.name} done", file=sys.stderr, flush=True)
    return results


def table_row(moment: str, ours: dict, bare: dict | None) -> str:
    """One entry point: medians (and the slowest) of wall time, CPU medians, the ratios."""
    wall, cpu = statistics.median(ours["seconds"]), statistics.median(ours["cpu_seconds"])
    row = f"{moment:<31} {wall:>11.3f} {max(ours['seconds']):>6.2f} {cpu:>6.3f} "
    if bare is not None:
        bare_wall, bare_cpu = (
            statistics.median(bare["seconds"]),
            statistics.median(bare["cpu_seconds"]),
        )
        row += (f"{bare_wall:>7.3f} {max(bare['seconds']):>6.2f} {bare_cpu:>6.3f} "
                f"{wall / bare_wall:>5.2f}x {cpu / bare_cpu:>5.2f}x")  # fmt: skip
    else:
        row += f"{'-':>7} {'':>6} {'':>6} {'':>6} {'':>6}"
    return row + "  " + ", ".join(f"{name} {ms:.0f}" for name, ms in ours["imports"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--only", default="", help="only the entry points whose name has this")
    args = parser.parse_args()
    load_before = os.getloadavg()[:3]
    from tests.fault_servers import RedisServer

    workdir = Path(tempfile.mkdtemp(prefix="trainyard-startup-"))
    redis = RedisServer()
    web = None
    try:
        ours, theirs = trainyard(workdir, redis.url), bare(workdir, redis.url)
        token = ours.python("manage.py", "issue_token", "alice").split()[-1]
        web_port = free_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "backend.wsgi", "--workers", "1",
             "--bind", f"127.0.0.1:{web_port}"],
            cwd=ours.directory, env=ours.env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        web_url = f"http://127.0.0.1:{web_port}"
        ours_points = [entry for entry in entry_points(ours, workdir, token, web_url)
                       if args.only in entry.name]  # fmt: skip
        bare_points = [entry for entry in entry_points(theirs, workdir, "", "")
                       if args.only in entry.name]  # fmt: skip
        ours_results = measure(ours, ours_points, workdir, args.repeat)
        bare_results = measure(theirs, bare_points, workdir, args.repeat)
    finally:
        if web is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(web.pid, signal.SIGKILL)
            web.wait()
        redis.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average before and after: {load_before} -> {os.getloadavg()[:3]}")
    print(f"{'entry point':<31} {'Trainyard s':>11} {'(max)':>6} {'CPU s':>6} {'bare s':>7} "
          f"{'(max)':>6} {'CPU s':>6} {'ratio':>6} {'CPU':>6}  "
          "Trainyard's slowest imports (ms, own time)")  # fmt: skip
    for moment, result in ours_results.items():
        print(table_row(moment, result, bare_results.get(moment)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"trainyard": ours_results, "bare": bare_results}, indent=2))


if __name__ == "__main__":
    main()
