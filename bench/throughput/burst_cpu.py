"""Where a burst's CPU goes: the embedded Trainyard's long-lived processes one by one, and,
with ``perf`` on the host, every process of the machine by command name.

    .venv/bin/python -m bench.throughput.burst_cpu [--jobs 1000] [--warm-up 200]
        [--sandbox runc] [--port 27620]
        [--database-url mysql://root@127.0.0.1:3306/trainyard_burst_cpu]

Starts the embedded Trainyard as ``bench.throughput.run`` does (its cluster of 4 x 8 GPUs,
a database of its own made afresh, the local backend with ``--sandbox``), runs a warm-up
burst, then a burst of ``--jobs`` ``true`` jobs from 4 clients, each as the throughput
bench runs one (``run.trainyard_burst``), while ``perf record -a`` samples the whole
machine (when ``perf`` is installed). Prints the burst's figures, the
CPU a job of each long-lived process of Trainyard's (from ``/proc/<pid>/stat``), the rest
of Trainyard's CPU (its short-lived processes: inits, runc, the jobs), and perf's share
of the machine's samples by command. As root.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.throughput.run import Trainyard, trainyard_burst

TICKS_PER_SECOND = 100  # USER_HZ: /proc's unit of CPU time


def processes(trainyard: Trainyard) -> dict[str, tuple[str, int]]:
    """pid -> (command line, CPU ticks so far) of every process in Trainyard's cgroup."""
    found = {}
    for pid in (trainyard.cpu_cgroup / "cgroup.procs").read_text().split():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        found[pid] = (command.strip()[:110], int(fields[11]) + int(fields[12]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--sandbox", default="runc", choices=("none", "runc"))
    parser.add_argument("--port", type=int, default=27620)
    parser.add_argument("--database-url", default="mysql://root@127.0.0.1:3306/trainyard_burst_cpu")
    args = parser.parse_args(argv)
    perf = shutil.which("perf")
    scratch = Path(tempfile.mkdtemp(prefix="burst-cpu-"))
    trainyard = Trainyard(args.database_url, args.port, args.sandbox)
    try:
        trainyard.start()
        print(f"warm-up: {trainyard_burst(trainyard, args.warm_up)}", file=sys.stderr)
        before = processes(trainyard)
        recorder = None
        if perf is not None:
            recorder = subprocess.Popen(
                [perf, "record", "-a", "-F", "299", "-o", str(scratch / "perf.data")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        figure = trainyard_burst(trainyard, args.jobs)
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait(timeout=120)
        after = processes(trainyard)
    finally:
        trainyard.stop()
    print(f"burst of {args.jobs} `true` jobs, sandbox {args.sandbox}: {figure}")
    print("\n| Trainyard's process | CPU a job, ms |\n|---|---|")
    long_lived = 0.0
    rows = []
    for pid, (command, ticks) in after.items():
        if pid in before:
            spent = (ticks - before[pid][1]) / TICKS_PER_SECOND * 1000 / args.jobs
            long_lived += spent
            rows.append((spent, command))
    for spent, command in sorted(rows, reverse=True):
        if spent >= 0.05:
            print(f"| `{command}` | {spent:.2f} |")
    total = figure["cpu_ms_per_job"]
    if isinstance(total, float):
        print(f"| the rest: short-lived processes (inits, runc, the jobs) | "
              f"{total - long_lived:.2f} |")  # fmt: skip
        print(f"| all of Trainyard's | {total:.2f} |")
    if perf is not None:
        report = subprocess.run(
            [perf, "report", "-i", str(scratch / "perf.data"), "--sort", "comm", "--stdio"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        lines = [line for line in report.splitlines() if line.strip() and line[0] != "#"]
        print("\nThe machine's CPU samples during the burst, by command (perf record -a):")
        print("\n".join(lines[:15]))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
