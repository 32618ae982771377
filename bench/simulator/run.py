"""Trace simulator benchmark: how fast one policy and placement replay a large trace.

    .venv/bin/python -m bench.simulator.run [--jobs 100000] [--policy RF] [--placement pack]
        [--itp /work/shared/traces/itp/cluster04.csv] [--gpw FILE.csv ...] [--interval 0]
        [--preemptible] [--profile]

Replays (1) a synthetic trace of ``--jobs`` jobs (10 VCs, seed 1) on 250 eight-GPU nodes,
and (2) a real ITP trace and (3) any Gen-Parallel-Workloads samples (``--gpw``: the public
Philly and Helios ones) on clusters sized for an offered load of 0.8; prints wall and CPU
seconds, jobs per second and scheduling passes, and writes ``bench/results/simulator.json``.
``--preemptible`` makes every job preemptible (checkpoints every 600 s, restarts cost
120 s, the live 24 h LAS wait limit), as the policy tables' preemptive runs do. The goal
(issue 32) is 15,000 jobs and 100,000 jobs each in under 20 s on a quiet machine.
``--profile`` prints where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: python bench/simulator/run.py
    sys.path.insert(0, str(REPO_ROOT))

from jobmanager.core.snapshot import Placement, Policy  # noqa: E402
from jobmanager.simulate import (  # noqa: E402
    ClusterSpec,
    SyntheticSpec,
    Trace,
    generate,
    load_gpw,
    load_itp,
    measure,
    nodes_for_load,
    replay,
    split_quotas,
)
from jobmanager.simulate.engine import ReplayOptions  # noqa: E402

RESULTS_FILE = REPO_ROOT / "bench" / "results" / "simulator.json"
DEFAULT_ITP = Path("/work/shared/traces/itp/cluster04.csv")
SYNTHETIC_NODES = 250
ITP_TARGET_LOAD = 0.8
GOAL_SECONDS = 20.0  # per replay, 15,000 jobs or 100,000 (issue 32)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="synthetic jobs (0: skip)")
    parser.add_argument("--itp", default=str(DEFAULT_ITP), help="ITP CSV ('' to skip)")
    parser.add_argument("--policy", type=Policy, default=Policy.RF, choices=list(Policy))
    parser.add_argument(
        "--placement", type=Placement, default=Placement.PACK, choices=list(Placement)
    )
    parser.add_argument("--gpw", nargs="*", default=[], help="Gen-Parallel-Workloads CSVs")
    parser.add_argument("--interval", type=float, default=0.0, help="scheduler period (0: events)")
    parser.add_argument("--preemptible", action="store_true", help="every job preemptible")
    parser.add_argument("--profile", action="store_true", help="print the top functions")
    return parser.parse_args(argv)


def bench(name: str, trace: Trace, cluster: ClusterSpec, args: argparse.Namespace) -> dict:
    quotas = split_quotas(trace.gpu_seconds_by_vc(), cluster.gpus)
    profiler = cProfile.Profile() if args.profile else None
    started, cpu_started = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    options = (
        ReplayOptions(
            preemptible=True,
            checkpoint_interval=600.0,
            restart_overhead=120.0,
            las_wait_limit=24 * 3600.0,
        )
        if args.preemptible
        else ReplayOptions(las_wait_limit=24 * 3600.0)
    )
    result = replay(
        trace,
        cluster,
        quotas,
        args.policy,
        args.placement,
        interval=args.interval,
        options=options,
    )
    if profiler is not None:
        profiler.disable()
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    metrics = measure(result)
    figures = {
        "trace": name,
        "jobs": len(trace.jobs),
        "nodes": cluster.nodes,
        "gpus": cluster.gpus,
        "run": metrics.label,
        "preemptible": args.preemptible,
        "interval_seconds": args.interval,
        "wall_seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "jobs_per_second": round(len(trace.jobs) / seconds, 1),
        "seconds_per_100k_jobs": round(seconds * 100_000 / max(len(trace.jobs), 1), 1),
        "passes": result.passes,
        "ms_per_pass": round(1000 * seconds / max(result.passes, 1), 3),
        "completed": metrics.completed,
        "preemptions": metrics.preemptions,
        "utilisation_makespan": round(metrics.utilisation_makespan, 4),
        "avg_queue_delay_s": round(metrics.avg_queue_delay, 1),
    }
    print(
        f"{name}: {figures['jobs']:,} jobs on {cluster.nodes} nodes ({metrics.label}"
        f"{', preemptible' if args.preemptible else ''}) in "
        f"{seconds:.1f} s ({cpu_seconds:.1f} s CPU) = {figures['jobs_per_second']:,.0f} jobs/s; "
        f"{result.passes:,} passes, {figures['ms_per_pass']} ms each; "
        f"{figures['preemptions']:,} preemptions (goal {GOAL_SECONDS:.0f} s a replay)",
        flush=True,
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(18)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = []
    if args.jobs > 0:
        spec = SyntheticSpec(jobs=args.jobs, vcs=10, seed=1)
        trace = generate(spec)
        runs.append(bench(trace.name, trace, ClusterSpec(SYNTHETIC_NODES), args))
    if args.itp:
        trace = load_itp([Path(args.itp)])
        cluster = ClusterSpec(nodes_for_load(trace, ITP_TARGET_LOAD))
        runs.append(bench(trace.name, trace, cluster, args))
    for path in args.gpw:
        trace = load_gpw(Path(path))
        cluster = ClusterSpec(nodes_for_load(trace, ITP_TARGET_LOAD))
        runs.append(bench(trace.name, trace, cluster, args))
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": {"python": platform.python_version(), "processor": platform.processor()},
        "goal_seconds_per_replay": GOAL_SECONDS,
        "runs": runs,
    }
    RESULTS_FILE.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS_FILE.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
