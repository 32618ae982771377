"""What a scheduler that knows no durations can learn about a waiting ITP job.

For each trace: the share of 1-GPU jobs, the share of the variance of log run time that
the GPU count explains (all a submission tells there), and, from a FIFO replay's per-job
CSV, the share of waiting jobs that halfway through their wait have an ended sibling (a
job of the same size submitted within 10 minutes), whose run time could predict theirs.

    .venv/bin/python -m bench.simulator.what_submissions_tell \\
        /work/shared/traces/itp/cluster01.csv DIR/jobs-FIFO+pack.csv
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
import statistics
from collections import defaultdict

SIBLING_WINDOW = 600.0


def size_information(trace: str) -> tuple[float, float]:
    """The share of 1-GPU jobs and of the variance of log run time the GPU count explains."""
    with open(trace, newline="") as rows:
        runs = [
            (int(row["num_gpu"]), math.log(int(row["duration"])))
            for row in csv.DictReader(rows)
            if int(row["duration"]) > 0
        ]
    mean = statistics.mean(log for _, log in runs)
    by_size: dict[int, list[float]] = defaultdict(list)
    for gpus, log in runs:
        by_size[gpus].append(log)
    between = sum(len(logs) * (statistics.mean(logs) - mean) ** 2 for logs in by_size.values())
    total = sum((log - mean) ** 2 for _, log in runs)
    return len(by_size[1]) / len(runs), between / total


def siblings_known(per_job_csv: str) -> tuple[int, int]:
    """Waiting jobs (over a minute), and those with an ended sibling halfway through."""
    with open(per_job_csv, newline="") as rows:
        jobs = [
            (float(row["submitted"]), float(row["ended"]), float(row["wait"]), int(row["gpus"]))
            for row in csv.DictReader(rows)
        ]
    by_size: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for submitted, ended, _, gpus in jobs:
        by_size[gpus].append((submitted, ended))
    for runs in by_size.values():
        runs.sort()
    waiting = [job for job in jobs if job[2] > 60]
    known = 0
    for submitted, _, wait, gpus in waiting:
        halfway = submitted + wait / 2
        runs = by_size[gpus]
        low = bisect.bisect_left(runs, (submitted - SIBLING_WINDOW,))
        high = bisect.bisect_right(runs, (submitted + SIBLING_WINDOW, math.inf))
        if any(ended <= halfway and at != submitted for at, ended in runs[low:high]):
            known += 1
    return len(waiting), known


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="an ITP trace CSV")
    parser.add_argument("fifo_jobs", help="jobs-FIFO+pack.csv of a replay of that trace")
    args = parser.parse_args()
    single, explained = size_information(args.trace)
    waiting, known = siblings_known(args.fifo_jobs)
    print(
        f"1-GPU jobs {100 * single:.0f} %; GPU count explains {100 * explained:.1f} % of the "
        f"variance of log run time; waiting jobs with an ended sibling halfway through "
        f"their wait: {known} of {waiting} ({100 * known / max(waiting, 1):.0f} %)"
    )


if __name__ == "__main__":
    main()
