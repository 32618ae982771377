"""A chart of every wait: the CDF of each job's time queued (its JCT less its run time,
waits after preemptions included) for runs of the simulator, one panel per cluster.

    .venv/bin/python -m bench.simulator.time_queued_chart OUT.png \\
        cluster01=DIR01 cluster02=DIR02 ...    # DIR: a simulate --output with jobs-*.csv
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def times_queued(path: Path) -> list[float]:
    """Each job's time queued in hours, sorted."""
    with path.open(newline="") as rows:
        return sorted(float(row["queued"]) / 3600 for row in csv.DictReader(rows))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("runs", nargs="+", metavar="NAME=DIR")
    args = parser.parse_args(argv)
    panels = [run.split("=", 1) for run in args.runs]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for axis, (name, directory) in zip(axes[0], panels, strict=True):
        for jobs in sorted(Path(directory).glob("jobs-*.csv")):
            queued = times_queued(jobs)
            shares = [(index + 1) / len(queued) for index in range(len(queued))]
            label = jobs.stem.removeprefix("jobs-")
            axis.step(queued, shares, where="post", label=f"{label} (longest {queued[-1]:.0f} h)")
        axis.set_title(name)
        axis.set_xlabel("time queued, every wait (hours)")
        axis.set_ylim(0, 1.01)
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right", fontsize=8)
    axes[0][0].set_ylabel("share of jobs")
    figure.tight_layout()
    figure.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
