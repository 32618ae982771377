"""How a comparison is shown: a text table, CSV and JSON rows, and a PNG of the delays."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path

from jobmanager.simulate.metrics import RunMetrics

HOUR = 3600.0
MINUTE = 60.0
CDF_POINTS = 2000

# Heading, width, and how a row's value is shown.
COLUMNS: tuple[tuple[str, int, object], ...] = (
    ("run", 12, lambda row: row.label),
    ("done", 7, lambda row: f"{row.completed}"),
    ("avg JCT h", 9, lambda row: _fixed(row.avg_jct / HOUR, 2)),
    ("p95 JCT h", 9, lambda row: _fixed(row.p95_jct / HOUR, 2)),
    ("avg wait m", 10, lambda row: _fixed(row.avg_queue_delay / MINUTE, 1)),
    ("p95 wait m", 10, lambda row: _fixed(row.p95_queue_delay / MINUTE, 1)),
    ("max wait h", 10, lambda row: _fixed(row.max_queue_delay / HOUR, 1)),
    ("avg queued m", 12, lambda row: _fixed(row.avg_time_queued / MINUTE, 1)),
    ("max queued h", 12, lambda row: _fixed(row.max_time_queued / HOUR, 1)),
    ("Jain slowdown", 13, lambda row: _fixed(row.jain_slowdown, 3)),
    ("Jain queued", 11, lambda row: _fixed(row.jain_time_queued, 3)),
    ("wait>15m", 8, lambda row: f"{row.queued_over_15min}"),
    ("preempt", 7, lambda row: f"{row.preemptions}"),
    # Gangs started under more than one network switch, of those on more than one node.
    ("gangs split", 11, lambda row: f"{row.straddled_starts}/{row.gang_starts}"),
    ("util% window", 12, lambda row: _fixed(100 * row.utilisation_submission_window, 1)),
    ("util% makespan", 14, lambda row: _fixed(100 * row.utilisation_makespan, 1)),
    ("makespan d", 10, lambda row: _fixed(row.makespan / (24 * HOUR), 2)),
    ("deadline met %", 14, lambda row: _fixed(100 * row.deadlines_met, 1)),
    ("wall s", 7, lambda row: _fixed(row.wall_seconds, 1)),
)


def write_all(
    output: Path,
    rows: Sequence[RunMetrics],
    delays: Sequence[Sequence[float]],
    setup: dict[str, object],
    title: str,
    jobs: Sequence[Sequence[dict[str, object]]] = (),
) -> None:
    """comparison.csv, comparison.json and comparison.png in ``output`` (made if missing),
    and jobs-<run>.csv with one row per job of each run."""
    output.mkdir(parents=True, exist_ok=True)
    for row, job_rows in zip(rows, jobs, strict=False):
        write_jobs(job_rows, output / f"jobs-{row.label}.csv")
    write_csv(rows, output / "comparison.csv")
    write_json(rows, setup, output / "comparison.json")
    write_plot(rows, delays, title, output / "comparison.png")


def table(rows: Sequence[RunMetrics]) -> str:
    """Runs side by side, one line each, right-aligned under short headings."""
    lines = ["  ".join(heading.rjust(width) for heading, width, _ in COLUMNS)]
    for row in rows:
        cells = [show(row).rjust(width) for _, width, show in COLUMNS]  # type: ignore[operator]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def write_csv(rows: Sequence[RunMetrics], path: Path) -> None:
    names = [field.name for field in fields(RunMetrics)]
    with path.open("w", newline="", encoding="utf-8") as target:
        writer = csv.DictWriter(target, fieldnames=names)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_row())


def write_jobs(rows: Sequence[dict[str, object]], path: Path) -> None:
    from jobmanager.simulate.metrics import JOB_COLUMNS

    with path.open("w", newline="", encoding="utf-8") as target:
        writer = csv.DictWriter(target, fieldnames=JOB_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def write_json(rows: Sequence[RunMetrics], setup: dict[str, object], path: Path) -> None:
    """The run's setup (trace, cluster, quotas) and one object per run; NaN becomes null."""
    document = {**setup, "runs": [_finite(row.as_row()) for row in rows]}
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def write_plot(
    rows: Sequence[RunMetrics], delays: Sequence[Sequence[float]], title: str, path: Path
) -> None:
    """Bars of average and p95 JCT and queueing delay per run, and each run's CDF of
    queueing delay."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (bars, cdf) = pyplot.subplots(1, 2, figsize=(13, 5))
    measures: tuple[tuple[str, Callable[[RunMetrics], float]], ...] = (
        ("avg JCT", lambda row: row.avg_jct),
        ("p95 JCT", lambda row: row.p95_jct),
        ("avg queueing\ndelay", lambda row: row.avg_queue_delay),
        ("p95 queueing\ndelay", lambda row: row.p95_queue_delay),
    )
    width = 0.8 / max(len(rows), 1)
    for offset, row in enumerate(rows):
        heights = [_zero_if_nan(value(row)) / HOUR for _, value in measures]
        positions = [index + (offset - (len(rows) - 1) / 2) * width for index in range(4)]
        bars.bar(positions, heights, width, label=row.label)
    bars.set_xticks(range(len(measures)), [name for name, _ in measures])
    bars.set_ylabel("hours")
    bars.set_title("Job completion time and queueing delay")
    bars.legend()

    for row, run_delays in zip(rows, delays, strict=True):
        ordered = sorted(delay / MINUTE for delay in run_delays)
        if ordered:
            # At most CDF_POINTS steps: a plot of 100,000 would look no different.
            ranks = range(0, len(ordered), max(1, len(ordered) // CDF_POINTS))
            points = [ordered[rank] for rank in ranks] + [ordered[-1]]
            shares = [(rank + 1) / len(ordered) for rank in ranks] + [1.0]
            cdf.step(points, shares, where="post", label=row.label)
    cdf.set_xscale("symlog", linthresh=1.0)
    cdf.set_xlabel("queueing delay (minutes, log scale above 1)")
    cdf.set_ylabel("share of jobs")
    cdf.set_ylim(0, 1.01)
    cdf.set_title("CDF of queueing delay")
    cdf.grid(alpha=0.3)
    cdf.legend(loc="lower right")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


def _fixed(value: float, digits: int) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def _zero_if_nan(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def _finite(row: dict[str, object]) -> dict[str, object]:
    return {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in row.items()
    }
