"""``python -m jobmanager.simulate``: replay a trace under each policy and placement, side by
side.

    python -m jobmanager.simulate itp /work/shared/traces/itp/cluster04.csv --target-load 0.8
    python -m jobmanager.simulate philly cluster_job_log.json --nodes 50
    python -m jobmanager.simulate gpw philly_data_training.csv --target-load 0.8
    python -m jobmanager.simulate synthetic --jobs 100000 --vcs 10 --seed 1 --nodes 250
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import datetime
from itertools import product
from pathlib import Path

from tqdm import tqdm

from jobmanager.core.snapshot import Placement, Policy
from jobmanager.simulate import loaders, report
from jobmanager.simulate.arguments import parse_args, replay_options
from jobmanager.simulate.cluster import ClusterSpec, nodes_for_load, offered_load, split_quotas
from jobmanager.simulate.engine import Replay, ReplayError, replay
from jobmanager.simulate.metrics import job_rows, measure, queue_delays
from jobmanager.simulate.synthetic import SyntheticSpec, generate
from jobmanager.simulate.trace import Trace, TraceError

REPO_ROOT = Path(__file__).resolve().parents[2]
INPUT_ERROR = 2  # as argparse exits on bad arguments
REPLAY_ERROR = 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        trace = load_trace(args)
    except TraceError as error:
        return _fail(str(error), INPUT_ERROR)
    if not trace.jobs:
        return _fail(f"trace {trace.name} has no job to replay", INPUT_ERROR)

    nodes = args.nodes or nodes_for_load(trace, args.target_load, args.gpus_per_node)
    cluster = ClusterSpec(nodes, args.gpus_per_node, args.gpu_type, args.nodes_per_switch)
    quotas = split_quotas(trace.gpu_seconds_by_vc(), cluster.gpus)
    _say(args, describe(trace, cluster, quotas))
    if args.target_load and offered_load(trace, cluster) < 0.9 * args.target_load:
        largest = max(job.gpus for job in trace.jobs)
        _say(args, f"note: sized for the largest job ({largest} GPUs), beyond the target load")

    combinations = list(product(args.policies, args.placements))
    try:
        if args.workers > 1 and len(combinations) > 1:
            runs = _replay_in_parallel(args, trace, cluster, quotas, combinations)
        else:
            runs = [
                _replay_with_progress(args, trace, cluster, quotas, policy, placement)
                for policy, placement in combinations
            ]
    except ReplayError as error:
        return _fail(str(error), REPLAY_ERROR)
    rows = [measure(run) for run in runs]
    print(report.table(rows))

    output = args.output or _default_output()
    title = (
        f"{trace.name}: {len(trace.jobs):,} jobs on {cluster.nodes} x {cluster.gpus_per_node} "
        f"{cluster.gpu_type} (offered load {offered_load(trace, cluster):.2f})"
    )
    delays = [queue_delays(run) for run in runs]
    jobs = [job_rows(run) for run in runs]
    try:
        report.write_all(
            output, rows, delays, setup(args, trace, cluster, quotas, argv), title, jobs
        )
    except OSError as error:
        return _fail(f"cannot write the results to {output}: {error}", REPLAY_ERROR)
    _say(
        args,
        f"wrote comparison.csv, comparison.json, comparison.png and jobs-<run>.csv to {output}",
    )
    return 0


def setup(
    args: argparse.Namespace,
    trace: Trace,
    cluster: ClusterSpec,
    quotas: dict[str, int],
    argv: Sequence[str] | None,
) -> dict[str, object]:
    """What was replayed on what, for the JSON beside the results."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    return {
        "command": " ".join(["python -m jobmanager.simulate", *arguments]),
        "trace": trace.name,
        "jobs": len(trace.jobs),
        "skipped_in_source": trace.skipped,
        "vcs": trace.vcs,
        "span_seconds": trace.span,
        "offered_gpu_seconds": trace.gpu_seconds,
        "offered_load": offered_load(trace, cluster),
        "cluster": {
            "nodes": cluster.nodes,
            "gpus_per_node": cluster.gpus_per_node,
            "gpu_type": cluster.gpu_type,
            "gpus": cluster.gpus,
            "nodes_per_switch": cluster.nodes_per_switch,
        },
        "quotas": quotas,
        "interval_seconds": args.interval,
        "starvation_seconds": args.starvation_seconds,
        "options": {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in vars(replay_options(args)).items()
        },
    }


def load_trace(args: argparse.Namespace) -> Trace:
    if args.source == "itp":
        return loaders.load_itp(args.files, args.limit)
    if args.source == "philly":
        return loaders.load_philly(args.file, args.limit)
    if args.source == "gpw":
        return loaders.load_gpw(args.file, args.limit)
    spec = SyntheticSpec(
        jobs=args.jobs,
        vcs=args.vcs,
        seed=args.seed,
        mean_interarrival=args.mean_interarrival,
        median_duration=args.median_duration,
    )
    trace = generate(spec)
    return Trace(trace.name, trace.jobs[: args.limit], trace.skipped)


def describe(trace: Trace, cluster: ClusterSpec, quotas: dict[str, int]) -> str:
    days = trace.span / 86400
    shown = ", ".join(f"{name} {gpus}" for name, gpus in sorted(quotas.items())[:12])
    more = f" and {len(quotas) - 12} more" if len(quotas) > 12 else ""
    return (
        f"trace {trace.name}: {len(trace.jobs):,} jobs in {len(trace.vcs)} VC(s) over "
        f"{days:.1f} days, {trace.gpu_seconds / 3600:,.0f} GPU-hours\n"
        f"cluster: {cluster.nodes} nodes x {cluster.gpus_per_node} {cluster.gpu_type} = "
        f"{cluster.gpus} GPUs, offered load {offered_load(trace, cluster):.2f}\n"
        f"VC quotas (GPUs, by offered load): {shown}{more}"
    )


def _progress_bar(args: argparse.Namespace, total: int, desc: str, unit: str) -> tqdm:
    """On stderr, and only when it is a terminal and --quiet is not given."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=args.quiet or not sys.stderr.isatty(),
        smoothing=0.05,
    )


def _replay_with_progress(
    args: argparse.Namespace,
    trace: Trace,
    cluster: ClusterSpec,
    quotas: dict[str, int],
    policy: Policy,
    placement: Placement,
) -> Replay:
    """One run, with a bar of the jobs ended so far."""
    label = f"{policy.value}+{placement.value}"
    with _progress_bar(args, len(trace.jobs), label, "job") as bar:
        return replay(
            trace,
            cluster,
            quotas,
            policy,
            placement,
            interval=args.interval,
            starvation_seconds=args.starvation_seconds,
            on_progress=bar.update,
            options=replay_options(args),
        )


def _replay_in_parallel(
    args: argparse.Namespace,
    trace: Trace,
    cluster: ClusterSpec,
    quotas: dict[str, int],
    combinations: list[tuple[Policy, Placement]],
) -> list[Replay]:
    """Runs in ``args.workers`` processes, with a bar of the runs done; results in order."""
    workers = min(args.workers, len(combinations))
    with (
        ProcessPoolExecutor(max_workers=workers) as pool,
        _progress_bar(args, len(combinations), "runs", "run") as bar,
    ):
        futures = [
            pool.submit(
                replay,
                trace,
                cluster,
                quotas,
                policy,
                placement,
                interval=args.interval,
                starvation_seconds=args.starvation_seconds,
                options=replay_options(args),
            )
            for policy, placement in combinations
        ]
        for _ in as_completed(futures):
            bar.update(1)
        return [future.result() for future in futures]


def _default_output() -> Path:
    var_dir = Path(os.environ.get("TRAINYARD_VAR_DIR") or REPO_ROOT / "var")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    output = var_dir / "simulations" / stamp
    suffix = 2
    while output.exists():
        output = var_dir / "simulations" / f"{stamp}-{suffix}"
        suffix += 1
    return output


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, file=sys.stderr)


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code
