"""Deadlines met beside ElasticFlow: the published artifact's schedulers and Trainyard's
policies on the same trace and cluster, as ratios to ElasticFlow (issue 34).

    .venv/bin/python -m bench.elasticflow.run --artifact /tmp/ElasticFlow \\
        --artifact-python /tmp/efvenv/bin/python [--themis] [--min-resize-interval 300]

``--artifact`` (or ``$ELASTICFLOW_DIR``) is a checkout of github.com/pkusys/ElasticFlow;
``--artifact-python`` (or ``$ELASTICFLOW_PYTHON``) a Python with what its simulator
imports (cvxpy pandas grpcio grpcio-tools psutil mip==1.12.0 six pyyaml scikit-learn
ecos). Nothing of the artifact is copied here: the bench runs its ``scheduler.py`` in that
checkout (after its ``make``, which generates its gRPC stubs), with Figure 8(a)'s
arguments, and reads its trace, cluster spec and throughput profiles from there.

Every scheduler is counted the same way: a job met its deadline if it ended by it (the
artifact's ``job.csv`` ``end_time`` <= ``ddl``; a job ElasticFlow declines never ends).
ElasticFlow's own figure (``final_result.csv``, counted by its planner's end times) is
printed beside it. Mean JCT is over the jobs that ended.

Trainyard replays the same jobs (jobmanager.simulate.elastic): each job's work is its
iterations, its scaling curve the profile's iterations/s at its global batch size, at
the largest power of two GPUs not above its size (the profiles have only those); a
resize costs what ElasticFlow charges (2 + 2 (log2 GPUs + 1) s). ``fixed``: each job
runs at its trace GPU count; ``elastic``: from 1 GPU up to the count where its curve
peaks. One VC holds the whole cluster; the core's backfill runs deadline jobs first.
``elastic+curves``: the core also sees each job's curve and work left (deadline jobs get
their minimum satisfactory share first, then idle GPUs go where they shorten jobs most);
``+admission``: a job whose deadline the core says at arrival it cannot meet runs
best-effort, without it (a VC's ``infeasible_deadlines: best_effort``), as ElasticFlow's
admission control does; it still counts as missed.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(REPO_ROOT))

from jobmanager.simulate.cluster import ClusterSpec  # noqa: E402
from jobmanager.simulate.elastic import (  # noqa: E402
    ElasticOptions,
    ElasticReplay,
    ElasticTraceJob,
    replay_elastic,
)

TRACE = "ElasticFlow/traces_for_ElasticFlow/elasticVpollux_e.csv"
SCHEDULER_DIR = "ElasticFlow/scheduler"
# label: (--scheme, --schedule), as run_fig8a.sh runs them
ARTIFACT_SCHEDULERS = {
    "EDF": ("elastic", "edf"),
    "Gandiva": ("gandiva", "gandiva"),
    "Tiresias": ("elastic", "dlas-gpu"),
    "ElasticFlow": ("elastic", "ef-accessctrl"),
}
THEMIS = {"Themis": ("elastic", "themis")}  # 32 min on one core: only with --themis


@dataclass
class Outcome:
    label: str
    met: float  # share of the trace's jobs that ended by their deadline
    mean_jct: float
    note: str = ""
    seconds: float = 0.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", type=Path, default=os.environ.get("ELASTICFLOW_DIR"))
    parser.add_argument(
        "--artifact-python", default=os.environ.get("ELASTICFLOW_PYTHON", sys.executable)
    )
    parser.add_argument("--trace", default=TRACE, help="relative to the artifact")
    parser.add_argument("--cluster-spec", default="cluster_specs/n16g4.csv")
    parser.add_argument("--gpu-type", default="T4", choices=["T4", "A100"])
    parser.add_argument("--themis", action="store_true", help="also run Themis (slow)")
    parser.add_argument("--skip-artifact", action="store_true")
    parser.add_argument(
        "--only", nargs="*", help="Trainyard's variants to run (default: all): fixed, elastic, ..."
    )
    parser.add_argument("--min-resize-interval", type=float, default=300.0)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--chart", type=Path, help="write a bar chart (PNG) here")
    args = parser.parse_args(argv)
    if args.artifact is None:
        parser.error("give --artifact (or $ELASTICFLOW_DIR): a checkout of pkusys/ElasticFlow")
    return args


# --- the artifact ---------------------------------------------------------------------------


def run_artifact(args: argparse.Namespace, label: str, scheme: str, schedule: str) -> Outcome:
    workdir = args.artifact / SCHEDULER_DIR
    with tempfile.TemporaryDirectory(prefix=f"ef-{schedule}-") as logs:
        command = [
            args.artifact_python, "scheduler.py", f"--cluster_spec={args.cluster_spec}",
            "--print", f"--scheme={scheme}", f"--trace_file=../../{args.trace}",
            f"--schedule={schedule}", f"--log_path={logs}", "--simulation=True",
            "--scheduling_slot=60", f"--gpu_type={args.gpu_type}",
        ]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(
                f"{label}: scheduler.py exited {done.returncode}:\n{done.stderr[-2000:]}"
            )
        met, jct = _count_job_log(Path(logs) / "job.csv", _trace_size(args))
        note = ""
        own = Path(logs) / "final_result.csv"
        if own.exists():
            rows = list(csv.DictReader(own.open()))
            note = f"own count {float(rows[-1]['ddl_satis_ratio']):.3f}"
        return Outcome(label, met, jct, note, seconds)


def _trace_size(args: argparse.Namespace) -> int:
    with (args.artifact / args.trace).open() as trace:
        return sum(1 for _ in csv.DictReader(trace))


def _count_job_log(path: Path, jobs: int) -> tuple[float, float]:
    met, jcts = 0, []
    with path.open() as log:
        for row in csv.DictReader(log):
            end, due = float(row["end_time"]), float(row["ddl"])
            if end > 0:
                jcts.append(end - float(row["submit_time"]))
                met += end <= due
    return met / jobs, sum(jcts) / len(jcts) if jcts else math.nan


# --- Trainyard ------------------------------------------------------------------------------


def load_profiles(directory: Path) -> dict[tuple[str, int], dict[int, float]]:
    """(model, global batch size) -> GPUs -> iterations/s, from the artifact's CSVs."""
    profiles: dict[tuple[str, int], dict[int, float]] = {}
    for path in sorted(directory.glob("*.csv")):
        with path.open() as table:
            for row in csv.DictReader(table):
                batch = int(row.pop("global_batch_size"))
                profiles[(path.stem, batch)] = {
                    int(gpus): float(rate)
                    for gpus, rate in row.items()
                    if rate and rate != "nan" and not math.isnan(float(rate))
                }
    return profiles


def curve(rates: dict[int, float], most: int) -> tuple[float, ...]:
    """Iterations/s at 1..most GPUs: at each count, the rate at the largest profiled
    power of two not above it."""
    values = []
    for gpus in range(1, most + 1):
        profiled = max(count for count in rates if count <= gpus)
        values.append(rates[profiled])
    return tuple(values)


def load_jobs(args: argparse.Namespace) -> tuple[list[ElasticTraceJob], ClusterSpec]:
    profiles = load_profiles(args.artifact / SCHEDULER_DIR / f"throughputs_{args.gpu_type}")
    with (args.artifact / SCHEDULER_DIR / args.cluster_spec).open() as spec:
        row = next(csv.DictReader(spec))
    nodes = int(row["num_switch"]) * int(row["num_node_p_switch"])
    cluster = ClusterSpec(nodes, int(row["num_gpu_p_node"]), args.gpu_type)
    jobs = []
    with (args.artifact / args.trace).open() as trace:
        for row in csv.DictReader(trace):
            rates = profiles[(row["model_name"], int(row["batch_size"]))]
            usable = [g for g in rates if g <= min(cluster.gpus, int(row["batch_size"]))]
            best = max(usable, key=lambda gpus: (rates[gpus], -gpus))
            asked = int(row["num_gpu"])
            jobs.append(
                ElasticTraceJob(
                    id=row["job_id"],
                    vc="default",
                    submitted=float(row["submit_time"]),
                    work=float(row["iteration"]),
                    throughput=curve(rates, max(best, asked)),
                    workers=asked,
                    min_workers=1,
                    max_workers=best,
                    deadline=float(row["ddl"]),
                )
            )
    return jobs, cluster


def resize_cost(gpus: int) -> float:
    return 2 + 2 * (math.log2(max(gpus, 1)) + 1)


# Trainyard's variants: label, then ElasticOptions' elastic, curves and admission.
VARIANTS = (
    ("fixed", False, False, False),
    ("elastic", True, False, False),
    ("elastic+curves", True, True, False),
    ("elastic+curves+admission", True, True, True),
)


def run_trainyard(
    args: argparse.Namespace, name: str, elastic: bool, curves: bool, admission: bool
) -> tuple[Outcome, ElasticReplay]:
    jobs, cluster = load_jobs(args)
    options = ElasticOptions(
        elastic=elastic,
        interval=args.interval,
        min_resize_interval=args.min_resize_interval,
        resize_cost=resize_cost,
        curves=curves,
        admission=admission,
    )
    started = time.perf_counter()
    run = replay_elastic(jobs, cluster, {"default": cluster.gpus}, options)
    seconds = time.perf_counter() - started
    label = f"Trainyard BF+{name}"
    note = f"{sum(run.resizes)} resizes" if elastic else ""
    return Outcome(label, run.met_deadlines(), run.mean_jct(), note, seconds), run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    outcomes: list[Outcome] = []
    if not args.skip_artifact:
        make = subprocess.run(
            ["make", f"PYTHON={args.artifact_python}"],
            cwd=args.artifact / SCHEDULER_DIR,
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": f"{Path(args.artifact_python).parent}:{os.environ['PATH']}"},
        )
        if make.returncode != 0:
            raise SystemExit(f"make in the artifact failed:\n{make.stderr[-2000:]}")
        schedulers = ARTIFACT_SCHEDULERS | (THEMIS if args.themis else {})
        for label, (scheme, schedule) in schedulers.items():
            outcomes.append(run_artifact(args, label, scheme, schedule))
            print(f"ran {label} in {outcomes[-1].seconds:.0f} s", file=sys.stderr)
    for variant in VARIANTS:
        if args.only and variant[0] not in args.only:
            continue
        outcomes.append(run_trainyard(args, *variant)[0])
        print(f"ran {outcomes[-1].label} in {outcomes[-1].seconds:.0f} s", file=sys.stderr)
    reference = next((o for o in outcomes if o.label == "ElasticFlow"), None)
    print(f"trace {args.trace} on {args.cluster_spec} ({args.gpu_type} profiles)")
    print(f"{'scheduler':<24} {'met':>6} {'x EF':>6} {'mean JCT h':>11} {'x EF':>6}  note")
    for outcome in outcomes:
        met_ratio = outcome.met / reference.met if reference else math.nan
        jct_ratio = outcome.mean_jct / reference.mean_jct if reference else math.nan
        print(
            f"{outcome.label:<24} {outcome.met:>6.3f} {met_ratio:>6.2f} "
            f"{outcome.mean_jct / 3600:>11.2f} {jct_ratio:>6.2f}  {outcome.note}"
        )
    if args.chart:
        chart(outcomes, args.chart)
    return 0


def chart(outcomes: list[Outcome], path: Path) -> None:
    """Deadlines met and mean JCT of each scheduler, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [outcome.label.replace("Trainyard ", "Trainyard\n") for outcome in outcomes]
    colours = ["#4c72b0" if "Trainyard" in o.label else "#999999" for o in outcomes]
    figure, (met, jct) = plt.subplots(1, 2, figsize=(11, 4))
    met.bar(labels, [outcome.met for outcome in outcomes], color=colours)
    met.set_ylabel("deadlines met (by each job log)")
    jct.bar(labels, [outcome.mean_jct / 3600 for outcome in outcomes], color=colours)
    jct.set_ylabel("mean JCT (h)")
    for axes in (met, jct):
        axes.tick_params(axis="x", labelsize=8, rotation=30)
    figure.suptitle("Figure 8(a)'s trace, 64 T4 GPUs: the ElasticFlow artifact and Trainyard")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
