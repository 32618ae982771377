"""Every policy on the public Philly and Helios samples, with and without preemption.

    .venv/bin/python -m bench.simulator.public_samples [--samples philly,helios]
        [--mirror GIT_DIR | --philly FILE.csv --helios FILE.csv] [--workers 2]

The samples are DIR-LAB's Gen-Parallel-Workloads training traces (15,000 jobs each, with
users; not kept in this repository): read from CSV files given by ``--philly`` /
``--helios``, or else from a clone or bare mirror of the repository (``--mirror``, or the
environment's ``TRAINYARD_GPW_MIRROR``). Each sample is one VC on a cluster of 8-GPU nodes
sized for an offered load of 0.8 (``--target-load``), as the ITP tables are; every policy
replays it without preemption and with every job preemptible (checkpoints every 600 s, a
restart costs 120 s), with the live 24 h wait limit (LAS and fair share promote a job
queued that long). Waits are counted in all: time queued = JCT minus the time the job ran;
first-start waits are shown beside it. Prints one table per sample, ratios to FIFO without
preemption, and the issue's three goals.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(REPO_ROOT))

from jobmanager.core.snapshot import DEFAULT_POLICY, Placement, Policy  # noqa: E402
from jobmanager.simulate import (  # noqa: E402
    ClusterSpec,
    Trace,
    load_gpw,
    measure,
    nodes_for_load,
    replay,
    split_quotas,
)
from jobmanager.simulate.engine import ReplayOptions  # noqa: E402
from jobmanager.simulate.metrics import RunMetrics  # noqa: E402

SAMPLE_PATHS = {
    "philly": "Philly/training_data/philly_data_training.csv",
    "helios": "Helios/training_data/helios_data_training.csv",
}
MIRROR_ENV = "TRAINYARD_GPW_MIRROR"
CHECKPOINT_INTERVAL = 600.0
RESTART_OVERHEAD = 120.0
LAS_WAIT_LIMIT = 24 * 3600.0  # the live default (TRAINYARD_LAS_WAIT_LIMIT_SECONDS)
HOUR, MINUTE = 3600.0, 60.0


@dataclass(frozen=True)
class Run:
    policy: Policy
    preemptible: bool
    metrics: RunMetrics
    cpu_seconds: float


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", default="philly,helios", help="default philly,helios")
    parser.add_argument("--mirror", type=Path, default=os.environ.get(MIRROR_ENV) or None)
    parser.add_argument("--philly", type=Path, help="the Philly sample's CSV")
    parser.add_argument("--helios", type=Path, help="the Helios sample's CSV")
    parser.add_argument("--target-load", type=float, default=0.8)
    parser.add_argument("--policies", default=",".join(policy.value for policy in Policy))
    parser.add_argument("--preemption", choices=("both", "no", "yes"), default="both")
    parser.add_argument("--workers", type=int, default=1, help="replays at once (processes)")
    args = parser.parse_args(argv)
    args.samples = [name.strip() for name in args.samples.split(",") if name.strip()]
    args.policies = [Policy(name.strip().upper()) for name in args.policies.split(",")]
    for name in args.samples:
        if name not in SAMPLE_PATHS:
            parser.error(f"unknown sample {name!r} (known: {', '.join(SAMPLE_PATHS)})")
        if getattr(args, name) is None and args.mirror is None:
            parser.error(f"give --{name} FILE.csv, or --mirror (or {MIRROR_ENV})")
    return args


def sample_file(name: str, args: argparse.Namespace, scratch: Path) -> Path:
    """The sample's CSV: the file given, or the one in the mirror written out to scratch."""
    given: Path | None = getattr(args, name)
    if given is not None:
        return given
    target = scratch / f"{name}.csv"
    content = subprocess.run(
        ["git", f"--git-dir={args.mirror}", "show", f"HEAD:{SAMPLE_PATHS[name]}"],
        check=True,
        capture_output=True,
    ).stdout
    target.write_bytes(content)
    return target


def options(preemptible: bool) -> ReplayOptions:
    if not preemptible:
        return ReplayOptions(las_wait_limit=LAS_WAIT_LIMIT)
    return ReplayOptions(
        preemptible=True,
        checkpoint_interval=CHECKPOINT_INTERVAL,
        restart_overhead=RESTART_OVERHEAD,
        las_wait_limit=LAS_WAIT_LIMIT,
    )


def replay_one(trace: Trace, cluster: ClusterSpec, policy: Policy, preemptible: bool) -> Run:
    """One replay, with the CPU seconds it took in its own process."""
    quotas = split_quotas(trace.gpu_seconds_by_vc(), cluster.gpus)
    cpu_started = time.process_time()
    result = replay(trace, cluster, quotas, policy, Placement.PACK, options=options(preemptible))
    return Run(policy, preemptible, measure(result), time.process_time() - cpu_started)


def table(runs: list[Run]) -> str:
    """Figures, and ratios to FIFO without preemption (the issue's reference)."""
    fifo = _without_preemption(runs, Policy.FIFO)
    headings = (
        "policy", "preempt", "mean queued m (first start)", "x FIFO", "longest queued h",
        "x FIFO longest wait", "p95 JCT h", "x FIFO", "Jain slowdown", "Jain queued",
        "preemptions", "wall s", "CPU s",
    )  # fmt: skip
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    for run in runs:
        row = run.metrics
        cells = (
            run.policy.value,
            "yes" if run.preemptible else "no",
            f"{row.avg_time_queued / MINUTE:,.2f} ({row.avg_queue_delay / MINUTE:,.2f})",
            f"{row.avg_time_queued / fifo.avg_time_queued:.2f}",
            f"{row.max_time_queued / HOUR:,.1f}",
            f"{row.max_time_queued / fifo.max_queue_delay:.2f}",
            f"{row.p95_jct / HOUR:,.2f}",
            f"{row.p95_jct / fifo.p95_jct:.3f}",
            f"{row.jain_slowdown:.3f}",
            f"{row.jain_time_queued:.3f}",
            f"{row.preemptions:,}",
            f"{row.wall_seconds:.1f}",
            f"{run.cpu_seconds:.1f}",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _without_preemption(runs: list[Run], policy: Policy) -> RunMetrics:
    return next(run.metrics for run in runs if run.policy == policy and not run.preemptible)


def goals(runs: list[Run]) -> list[str]:
    """The issue's three goals, each with the figures that decide it: the default's mean
    time queued against the best run of the same preemption setting (and of all runs),
    the longest time queued of any run, the worst p95 JCT of any run and the default's."""
    fifo = _without_preemption(runs, Policy.FIFO)
    lines = []
    for preemptible in sorted({run.preemptible for run in runs}):
        same = [run for run in runs if run.preemptible == preemptible]
        default = next((run for run in same if run.policy == DEFAULT_POLICY), None)
        if default is None:
            continue
        best = min(same, key=lambda run: run.metrics.avg_time_queued)
        ratio = default.metrics.avg_time_queued / best.metrics.avg_time_queued
        lines.append(
            f"default ({DEFAULT_POLICY.value}, preemption {_yes(preemptible)}) mean time "
            f"queued {default.metrics.avg_time_queued / MINUTE:,.2f} min = {ratio:.2f}x the "
            f"best of its setting ({best.policy.value}, "
            f"{best.metrics.avg_time_queued / MINUTE:,.2f} min): "
            f"{'met' if ratio <= 1.05 else 'NOT met'} (goal <= 1.05x); its p95 JCT "
            f"{default.metrics.p95_jct / fifo.p95_jct:.3f}x FIFO's"
        )
    worst_longest = max(runs, key=lambda run: run.metrics.max_time_queued)
    longest = worst_longest.metrics.max_time_queued / fifo.max_queue_delay
    worst_p95 = max(runs, key=lambda run: run.metrics.p95_jct)
    p95 = worst_p95.metrics.p95_jct / fifo.p95_jct
    return [
        *lines,
        f"longest time queued of any run {longest:.2f}x FIFO's longest wait "
        f"({worst_longest.policy.value}, preemption {_yes(worst_longest.preemptible)}): "
        f"{'met' if longest <= 1.5 else 'NOT met'} (goal <= 1.5x)",
        f"worst p95 JCT {p95:.3f}x FIFO's ({worst_p95.policy.value}, preemption "
        f"{_yes(worst_p95.preemptible)}): {'met' if p95 <= 1.0 else 'NOT met'} (goal <= 1x)",
    ]


def _yes(preemptible: bool) -> str:
    return "yes" if preemptible else "no"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    preemption = {"both": (False, True), "no": (False,), "yes": (True,)}[args.preemption]
    with tempfile.TemporaryDirectory(prefix="gpw-") as scratch:
        for name in args.samples:
            trace = load_gpw(sample_file(name, args, Path(scratch)))
            cluster = ClusterSpec(nodes_for_load(trace, args.target_load))
            print(
                f"\n{name}: {len(trace.jobs):,} jobs with GPUs ({trace.skipped:,} without, "
                f"skipped) of {len({job.user for job in trace.jobs})} users over "
                f"{trace.span / 86400:.1f} days, {trace.gpu_seconds / HOUR:,.0f} GPU-hours; "
                f"one VC on {cluster.nodes} x 8 GPUs = {cluster.gpus} GPUs "
                f"(offered load {args.target_load})",
                flush=True,
            )
            combinations = [(p, pre) for pre in preemption for p in args.policies]
            if Policy.FIFO not in args.policies or False not in preemption:
                combinations.insert(0, (Policy.FIFO, False))  # the reference
            with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
                futures = [
                    pool.submit(replay_one, trace, cluster, policy, preemptible)
                    for policy, preemptible in combinations
                ]
                runs = [future.result() for future in futures]
            print(table(runs))
            if DEFAULT_POLICY in args.policies:
                for line in goals(runs):
                    print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
