"""Deadlines met beside ElasticFlow: the published artifact's schedulers and Trainyard's
policies on the same traces and clusters, as ratios to ElasticFlow (issue 34).

    .venv/bin/python -m bench.elasticflow.run --artifact /tmp/ElasticFlow \\
        --artifact-python /tmp/efvenv/bin/python --microsoft-traces /tmp/elasticflow-traces \\
        --traces fig8a fig8b-cluster10 fig10 fig11-be0.5 [--themis] [--chart PNG]

``--artifact`` (or ``$ELASTICFLOW_DIR``) is a checkout of github.com/pkusys/ElasticFlow;
``--artifact-python`` (or ``$ELASTICFLOW_PYTHON``) a Python with what its simulator
imports (cvxpy pandas grpcio grpcio-tools psutil mip==1.12.0 six pyyaml scikit-learn
ecos numpy); ``--microsoft-traces`` (or ``$ELASTICFLOW_TRACES_DIR``) a checkout of
github.com/microsoft/elasticflow-traces (for Figure 8(b)'s cluster traces). Nothing of
the artifact is copied here: the bench runs its ``scheduler.py`` in that checkout (after
its ``make``, which generates its gRPC stubs) with each figure's arguments, and reads the
traces, cluster specs and throughput profiles from there (bench.elasticflow.traces says
which trace runs on which cluster, and how the generated ones are made).

Every scheduler is counted the same way: a job with a deadline met it if it ended by it
(the artifact's ``job.csv`` ``end_time`` <= ``ddl``; a job ElasticFlow declines never
ends), as a share of the trace's jobs with a deadline; best-effort jobs (the trace's
``best_effort`` 1) have none. ElasticFlow's own figure (``final_result.csv``, counted by
its planner's end times) is printed beside it. Mean JCT is over the jobs that ended, and
separately over the best-effort jobs where the trace has some.

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

from bench.elasticflow.traces import SETUPS, TraceSetup, trace_path  # noqa: E402
from jobmanager.simulate.cluster import ClusterSpec  # noqa: E402
from jobmanager.simulate.elastic import (  # noqa: E402
    ElasticOptions,
    ElasticReplay,
    ElasticTraceJob,
    replay_elastic,
)

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
    met: float  # share of the trace's deadline jobs that ended by their deadline
    mean_jct: float  # over the jobs that ended
    best_effort_jct: float = math.nan  # over the best-effort jobs that ended
    note: str = ""
    seconds: float = 0.0


@dataclass
class Trace:
    """A trace ready to run: its setup, its CSV, and its rows with the columns named alike."""

    setup: TraceSetup
    path: Path
    rows: list[dict[str, str]]

    @property
    def deadline_jobs(self) -> int:
        return sum(1 for row in self.rows if not _best_effort(row))

    @property
    def best_effort_jobs(self) -> int:
        return len(self.rows) - self.deadline_jobs


# The microsoft/elasticflow-traces files name three columns differently (the artifact's
# jobs.py reads both spellings).
COLUMN_NAMES = {"submission_time": "submit_time", "num_iteration": "iteration", "deadline": "ddl"}


def read_trace(path: Path) -> list[dict[str, str]]:
    with path.open() as trace:
        return [
            {COLUMN_NAMES.get(name, name): value for name, value in row.items()}
            for row in csv.DictReader(trace)
        ]


def _best_effort(row: dict[str, str]) -> bool:
    return int(row.get("best_effort") or 0) == 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", type=Path, default=os.environ.get("ELASTICFLOW_DIR"))
    parser.add_argument(
        "--artifact-python", default=os.environ.get("ELASTICFLOW_PYTHON", sys.executable)
    )
    parser.add_argument(
        "--microsoft-traces", type=Path, default=os.environ.get("ELASTICFLOW_TRACES_DIR")
    )
    parser.add_argument(
        "--traces", nargs="+", default=["fig8a"], choices=sorted(SETUPS), metavar="TRACE",
        help=f"which traces (default fig8a): {', '.join(SETUPS)}",
    )  # fmt: skip
    parser.add_argument("--themis", action="store_true", help="also run Themis (slow)")
    parser.add_argument("--skip-artifact", action="store_true")
    parser.add_argument(
        "--only", nargs="*", help="Trainyard's variants to run (default: all): fixed, elastic, ..."
    )
    parser.add_argument("--min-resize-interval", type=float, default=300.0)
    parser.add_argument("--chart", type=Path, help="write a bar chart (PNG) here")
    args = parser.parse_args(argv)
    if args.artifact is None:
        parser.error("give --artifact (or $ELASTICFLOW_DIR): a checkout of pkusys/ElasticFlow")
    return args


# --- the artifact ---------------------------------------------------------------------------


def run_artifact(
    args: argparse.Namespace, trace: Trace, label: str, scheme: str, schedule: str
) -> Outcome:
    workdir = args.artifact / SCHEDULER_DIR
    with tempfile.TemporaryDirectory(prefix=f"ef-{schedule}-") as logs:
        command = [
            args.artifact_python, "scheduler.py", f"--cluster_spec={trace.setup.cluster_spec}",
            "--print", f"--scheme={scheme}", f"--trace_file={trace.path.resolve()}",
            f"--schedule={schedule}", f"--log_path={logs}", "--simulation=True",
            f"--scheduling_slot={trace.setup.slot:g}", f"--gpu_type={trace.setup.gpu_type}",
        ]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(
                f"{label}: scheduler.py exited {done.returncode}:\n{done.stderr[-2000:]}"
            )
        outcome = _count_job_log(Path(logs) / "job.csv", trace)
        own = Path(logs) / "final_result.csv"
        if own.exists():
            rows = list(csv.DictReader(own.open()))
            outcome.note = f"own count {float(rows[-1]['ddl_satis_ratio']):.3f}"
        outcome.label, outcome.seconds = label, seconds
        return outcome


def _count_job_log(path: Path, trace: Trace) -> Outcome:
    met, jcts, best_effort_jcts = 0, [], []
    with path.open() as log:
        for row in csv.DictReader(log):
            end, submitted = float(row["end_time"]), float(row["submit_time"])
            if end <= 0:
                continue
            jcts.append(end - submitted)
            if int(row["best_effort_job"]) == 1:
                best_effort_jcts.append(end - submitted)
            else:
                met += end <= float(row["ddl"])
    return Outcome("", met / trace.deadline_jobs, _mean(jcts), _mean(best_effort_jcts))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


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


def load_jobs(args: argparse.Namespace, trace: Trace) -> tuple[list[ElasticTraceJob], ClusterSpec]:
    setup = trace.setup
    profiles = load_profiles(args.artifact / SCHEDULER_DIR / f"throughputs_{setup.gpu_type}")
    with (args.artifact / SCHEDULER_DIR / setup.cluster_spec).open() as spec:
        row = next(csv.DictReader(spec))
    nodes = int(row["num_switch"]) * int(row["num_node_p_switch"])
    cluster = ClusterSpec(nodes, int(row["num_gpu_p_node"]), setup.gpu_type)
    jobs = []
    for row in trace.rows:
        rates = profiles[(row["model_name"], int(row["batch_size"]))]
        usable = [g for g in rates if g <= min(cluster.gpus, int(row["batch_size"]))]
        best = max(usable, key=lambda gpus: (rates[gpus], -gpus))
        asked = min(int(row["num_gpu"]), cluster.gpus)
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
                deadline=None if _best_effort(row) else float(row["ddl"]),
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
    args: argparse.Namespace,
    trace: Trace,
    name: str,
    elastic: bool,
    curves: bool,
    admission: bool,
) -> tuple[Outcome, ElasticReplay]:
    jobs, cluster = load_jobs(args, trace)
    options = ElasticOptions(
        elastic=elastic,
        interval=trace.setup.slot,
        min_resize_interval=args.min_resize_interval,
        resize_cost=resize_cost,
        curves=curves,
        admission=admission,
    )
    started = time.perf_counter()
    run = replay_elastic(jobs, cluster, {"default": cluster.gpus}, options)
    seconds = time.perf_counter() - started
    best_effort = [index for index, due in enumerate(run.deadlines) if due is None]
    outcome = Outcome(
        f"Trainyard BF+{name}",
        run.met_deadlines(),
        run.mean_jct(),
        run.mean_jct(best_effort) if best_effort else math.nan,
        f"{sum(run.resizes)} resizes" if elastic else "",
        seconds,
    )
    return outcome, run


def run_trace(args: argparse.Namespace, trace: Trace) -> list[Outcome]:
    """Every scheduler on one trace, the artifact's first."""
    outcomes: list[Outcome] = []
    if not args.skip_artifact:
        schedulers = ARTIFACT_SCHEDULERS | (THEMIS if args.themis else {})
        for label, (scheme, schedule) in schedulers.items():
            outcomes.append(run_artifact(args, trace, label, scheme, schedule))
            _ran(trace, outcomes[-1])
    for variant in VARIANTS:
        if args.only and variant[0] not in args.only:
            continue
        outcomes.append(run_trainyard(args, trace, *variant)[0])
        _ran(trace, outcomes[-1])
    return outcomes


def _ran(trace: Trace, outcome: Outcome) -> None:
    print(f"{trace.setup.name}: ran {outcome.label} in {outcome.seconds:.0f} s", file=sys.stderr)


def make_artifact(args: argparse.Namespace) -> None:
    """The artifact's ``make``: its gRPC stubs, generated for the installed protobuf."""
    python_dir = Path(args.artifact_python).parent
    done = subprocess.run(
        ["make", f"PYTHON={args.artifact_python}"],
        cwd=args.artifact / SCHEDULER_DIR,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{python_dir}:{os.environ['PATH']}"},
    )
    if done.returncode != 0:
        raise SystemExit(f"make in the artifact failed:\n{done.stderr[-2000:]}")


def print_table(trace: Trace, outcomes: list[Outcome]) -> None:
    setup = trace.setup
    print(
        f"\n{setup.name} ({setup.figure}): {trace.path.name}, {len(trace.rows)} jobs "
        f"({trace.best_effort_jobs} best-effort), {setup.cluster_spec}, "
        f"{setup.gpu_type} profiles, {setup.slot:g} s slots"
    )
    print(
        f"{'scheduler':<34} {'met':>6} {'x EF':>6} {'JCT h':>8} {'x EF':>6} "
        f"{'BE JCT h':>9} {'x Tir':>6}  note"
    )
    reference = next((o for o in outcomes if o.label == "ElasticFlow"), None)
    tiresias = next((o for o in outcomes if o.label == "Tiresias"), None)
    for outcome in outcomes:
        met_ratio = outcome.met / reference.met if reference and reference.met else math.nan
        jct_ratio = outcome.mean_jct / reference.mean_jct if reference else math.nan
        best_effort_ratio = (
            outcome.best_effort_jct / tiresias.best_effort_jct if tiresias else math.nan
        )
        print(
            f"{outcome.label:<34} {outcome.met:>6.3f} {met_ratio:>6.2f} "
            f"{outcome.mean_jct / 3600:>8.2f} {jct_ratio:>6.2f} "
            f"{outcome.best_effort_jct / 3600:>9.2f} {best_effort_ratio:>6.2f}  {outcome.note}"
        )


def print_goal(trace: Trace, outcomes: list[Outcome]) -> None:
    """Issue 34's goal on this trace: Trainyard's best policy meets at least as many
    deadlines as ElasticFlow, and the jobs without a deadline end no later on average than
    under Tiresias (the best-effort jobs where the trace has some; where every job has a
    deadline, all the jobs)."""
    ours = [o for o in outcomes if o.label.startswith("Trainyard")]
    reference = next((o for o in outcomes if o.label == "ElasticFlow"), None)
    tiresias = next((o for o in outcomes if o.label == "Tiresias"), None)
    if not ours or reference is None or tiresias is None:
        print(f"goal on {trace.setup.name}: not judged (needs Trainyard, ElasticFlow, Tiresias)")
        return
    best = max(ours, key=lambda o: (o.met, -o.mean_jct))
    deadlines = best.met >= reference.met
    if trace.best_effort_jobs:
        which, ours_jct, theirs = (
            "best-effort jobs'",
            best.best_effort_jct,
            tiresias.best_effort_jct,
        )
    else:
        which, ours_jct, theirs = (
            "all jobs' (none without a deadline)",
            best.mean_jct,
            tiresias.mean_jct,
        )
    jct = ours_jct <= theirs
    print(
        f"goal on {trace.setup.name}: {best.label} met {best.met:.3f} >= ElasticFlow "
        f"{reference.met:.3f}: {'yes' if deadlines else 'NO'}; {which} mean JCT "
        f"{ours_jct / 3600:.2f} h <= Tiresias {theirs / 3600:.2f} h: {'yes' if jct else 'NO'}"
        f" -> goal {'met' if deadlines and jct else 'NOT met'}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.skip_artifact:
        make_artifact(args)
    results: list[tuple[Trace, list[Outcome]]] = []
    with tempfile.TemporaryDirectory(prefix="ef-traces-") as scratch:
        for name in args.traces:
            setup = SETUPS[name]
            path = trace_path(
                setup, args.artifact, args.artifact_python, args.microsoft_traces, Path(scratch)
            )
            trace = Trace(setup, path, read_trace(path))
            results.append((trace, run_trace(args, trace)))
            print_table(trace, results[-1][1])
            print_goal(trace, results[-1][1])
            if args.chart:  # after each trace: a run stopped later keeps what it made
                chart(results, args.chart)
    return 0


def chart(results: list[tuple[Trace, list[Outcome]]], path: Path) -> None:
    """Deadlines met and mean JCT of each scheduler, one column of two panels per trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(results), figsize=(4.2 * len(results), 7), squeeze=False)
    for column, (trace, outcomes) in enumerate(results):
        labels = [o.label.replace("Trainyard BF+", "TY ") for o in outcomes]
        colours = ["#4c72b0" if "Trainyard" in o.label else "#999999" for o in outcomes]
        met, jct = axes[0][column], axes[1][column]
        met.bar(labels, [o.met for o in outcomes], color=colours)
        cluster_name = Path(trace.setup.cluster_spec).stem
        met.set_title(f"{trace.setup.name}: {len(trace.rows)} jobs, {cluster_name}")
        jct.bar(labels, [o.mean_jct / 3600 for o in outcomes], color=colours)
        if column == 0:
            met.set_ylabel("deadlines met (by each job log)")
            jct.set_ylabel("mean JCT (h)")
        for panel in (met, jct):
            panel.tick_params(axis="x", labelsize=7, rotation=60)
    figure.suptitle("ElasticFlow's artifact (grey) and Trainyard (blue)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
