"""Whether a job costs more once many have run: the same arrays one after another on one
embedded Trainyard, and the idle submit-to-start before and after them.

    .venv/bin/python -m bench.throughput.history [--arrays 6] [--jobs 1000] [--sequential 30]
        [--sandbox none] [--before DIR] [--port 27420]
        [--database-url mysql://root@127.0.0.1:3306/trainyard_history]

Starts the embedded Trainyard as ``bench.throughput.run`` does (its cluster of 4 x 8 GPUs,
a database of its own made afresh, the local backend with ``--sandbox``), measures
``--sequential`` jobs one at a time on the idle cluster (submit call to the command's own
start), then ``--arrays`` arrays of ``--jobs`` ``true`` tasks one after another (jobs/s
from the submission until every task finished, and the CPU of Trainyard's processes and
containers a job), then the idle jobs again: with history kept, the job manager's rounds
should cost the same after 6,000 jobs as after none. With ``--before DIR`` (a checkout of
another version, e.g. ``git worktree add DIR COMMIT``, using this virtual environment), the
same is measured on that version first, in the same run, and each figure is given as a
ratio. As root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.throughput.run import REPO_ROOT, Trainyard, array, cpu_per_job, sequential


def measure(trainyard: Trainyard, label: str, arrays: int, jobs: int, count: int) -> dict:
    """Idle submit-to-start, the arrays one after another, idle again."""
    watcher = trainyard.session()

    def idle() -> dict:
        return sequential(
            lambda: trainyard.submit(watcher, "date +%s.%N")["id"], trainyard.command_start, count
        )

    figures: dict = {"idle before": idle(), "arrays": []}
    for number in range(arrays):
        cpu_before = trainyard.cpu_seconds()
        figure = array(
            lambda: trainyard.submit(watcher, "true", array={"count": jobs}),
            jobs,
            lambda: trainyard.unfinished(watcher),
        )
        figure["cpu_ms_per_job"] = cpu_per_job(trainyard, cpu_before, jobs)
        print(f"  {label}: array {number + 1}: {figure}", file=sys.stderr)
        figures["arrays"].append(figure)
    figures["idle after"] = idle()
    return figures


def table(results: dict[str, dict], jobs: int) -> list[str]:
    names = list(results)
    lines = ["| measure | " + " | ".join(names) + (" | ratio |" if len(names) == 2 else " |")]
    lines.append("|---" * (len(names) + 1 + (len(names) == 2)) + "|")

    def row(label: str, values: list[float], unit: str) -> None:
        cells = [f"{value:g} {unit}" for value in values]
        ratio = [f"{values[1] / values[0]:.2f}x"] if len(values) == 2 and values[0] else []
        lines.append("| " + " | ".join([label, *cells, *ratio]) + " |")

    for moment in ("idle before", "idle after"):
        row(f"{moment}: submit to start p50", [r[moment]["p50_s"] for r in results.values()], "s")
    count = len(next(iter(results.values()))["arrays"])
    for index in range(count):
        label = f"array {index + 1} ({index * jobs:,} jobs before it)"
        row(f"{label}: jobs/s", [r["arrays"][index]["jobs_per_s"] for r in results.values()], "")
        row(
            f"{label}: CPU a job",
            [r["arrays"][index]["cpu_ms_per_job"] for r in results.values()],
            "ms",
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arrays", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--sequential", type=int, default=30)
    parser.add_argument("--sandbox", default="none", choices=("none", "runc"))
    parser.add_argument("--before", type=Path, help="a checkout of the version to compare")
    parser.add_argument("--port", type=int, default=27420)
    parser.add_argument("--database-url", default="mysql://root@127.0.0.1:3306/trainyard_history")
    args = parser.parse_args(argv)
    codes = [args.before.resolve(), REPO_ROOT] if args.before else [REPO_ROOT]
    results: dict[str, dict] = {}
    for index, code in enumerate(codes):
        label = "this checkout" if code == REPO_ROOT else f"{code} (before)"
        trainyard = Trainyard(
            f"{args.database_url}_{index}", args.port + 10 * index, args.sandbox, code
        )
        try:
            trainyard.start()
            results[label] = measure(trainyard, label, args.arrays, args.jobs, args.sequential)
        finally:
            trainyard.stop()
    print("\n".join(table(results, args.jobs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
