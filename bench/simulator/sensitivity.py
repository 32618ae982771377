"""How far a policy's mean time queued moves when nothing that matters changes: each
trace replayed as given and with every submission moved by at most ``--jitter`` seconds.

    .venv/bin/python -m bench.simulator.sensitivity [--synthetic-seeds 1,2,3]
        [--gpw FILE.csv[:LOAD] ...] [--itp FILE.csv ...] [--jitters 5] [--jitter 1.0]
        [--policies BF,LAS,FS] [--preemption yes] [--workers 2] [--chart FILE.png]

Goal (a) of issue 32 compares the default's mean time queued with the best policy's on
each trace, to 5 %. On a congested trace one early decision changes which jobs meet which
later, so a replay's mean can move further than that by chance alone. This replays each
trace (generated ones, ``jobmanager.simulate synthetic --jobs 3000 --vcs 1
--mean-interarrival 600 --target-load 0.9`` with each of ``--synthetic-seeds``; public
samples given by ``--gpw``, each at its load, 0.8 unless given; ITP traces, at 0.8) as given and
``--jitters`` times with each submission moved by a uniform draw in +-``--jitter`` s
(seeded, so a run is repeatable; sizes and run times unchanged), every policy
with the live 24 h wait limit and, with ``--preemption yes``, every job preemptible
(checkpoints every 600 s, a restart costs 120 s). Prints, per trace, each policy's mean
time queued (every wait counted) in every replay, their spread, and the default's ratio to
the best in each replay; ``--chart`` draws those ratios, a trace a column.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from bench.simulator.public_samples import MINUTE, options
from jobmanager.core.snapshot import DEFAULT_POLICY, Placement, Policy
from jobmanager.simulate import (
    ClusterSpec,
    Trace,
    load_gpw,
    load_itp,
    measure,
    nodes_for_load,
    replay,
    split_quotas,
)
from jobmanager.simulate.synthetic import SyntheticSpec, generate


def jittered(trace: Trace, seconds: float, seed: int) -> Trace:
    """The trace with each submission moved by a uniform draw in +-``seconds`` (none for
    seed 0), in submission order again."""
    if seed == 0:
        return trace
    rng = random.Random(seed)
    jobs = [
        replace(job, submitted=max(0.0, job.submitted + rng.uniform(-seconds, seconds)))
        for job in trace.jobs
    ]
    jobs.sort(key=lambda job: job.submitted)
    return Trace(f"{trace.name}+jitter{seed}", tuple(jobs), trace.skipped)


def mean_time_queued(trace: Trace, nodes: int, policy: Policy, preemptible: bool) -> float:
    """One replay's mean time queued, in minutes."""
    cluster = ClusterSpec(nodes)
    quotas = split_quotas(trace.gpu_seconds_by_vc(), cluster.gpus)
    result = replay(trace, cluster, quotas, policy, Placement.PACK, options=options(preemptible))
    return measure(result).avg_time_queued / MINUTE


def traces(args: argparse.Namespace) -> list[tuple[Trace, float]]:
    """Each trace to replay, with the target load its cluster is sized for."""
    found = []
    for seed in args.synthetic_seeds:
        spec = SyntheticSpec(jobs=3000, vcs=1, seed=seed, mean_interarrival=600.0)
        found.append((generate(spec), 0.9))
    for given in args.gpw:
        path, _, load = given.rpartition(":") if given.count(":") else (given, "", "")
        found.append((load_gpw(Path(path)), float(load) if load else 0.8))
    found += [(load_itp([path]), 0.8) for path in args.itp]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic-seeds", default="1,2,3")
    parser.add_argument(
        "--gpw", action="append", default=[], metavar="FILE[:LOAD]",
        help="a Gen-Parallel-Workloads sample's CSV, and its target load (default 0.8)",
    )  # fmt: skip
    parser.add_argument("--itp", type=Path, nargs="*", default=[], help="ITP traces' CSVs")
    parser.add_argument("--jitters", type=int, default=5, help="jittered replays a trace")
    parser.add_argument("--jitter", type=float, default=1.0, help="seconds, at most")
    parser.add_argument("--policies", default="BF,LAS,FS")
    parser.add_argument("--preemption", choices=("yes", "no"), default="yes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chart", type=Path, help="a PNG of the default's ratios to the best")
    args = parser.parse_args(argv)
    args.synthetic_seeds = [int(seed) for seed in args.synthetic_seeds.split(",") if seed]
    policies = [Policy(name.strip().upper()) for name in args.policies.split(",")]
    preemptible = args.preemption == "yes"

    charted: dict[str, list[float]] = {}
    for trace, load in traces(args):
        nodes = nodes_for_load(trace, load)
        variants = [jittered(trace, args.jitter, seed) for seed in range(args.jitters + 1)]
        with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
            futures = {
                (index, policy): pool.submit(mean_time_queued, variant, nodes, policy, preemptible)
                for index, variant in enumerate(variants)
                for policy in policies
            }
            means = {key: future.result() for key, future in futures.items()}
        print(
            f"\n{trace.name}: {len(trace.jobs):,} jobs on {nodes} x 8 GPUs, preemption "
            f"{args.preemption}; mean time queued, min (replay 0 as given, then each "
            f"submission moved by at most {args.jitter:g} s):"
        )
        print("| policy | " + " | ".join(str(i) for i in range(len(variants)))
              + " | min-max spread |")  # fmt: skip
        print("|---" * (len(variants) + 2) + "|")
        for policy in policies:
            row = [means[(index, policy)] for index in range(len(variants))]
            spread = max(row) / min(row)
            cells = " | ".join(f"{value:,.1f}" for value in row)
            print(f"| {policy.value} | {cells} | {spread:.2f}x |")
        if DEFAULT_POLICY in policies:
            ratios = []
            for index in range(len(variants)):
                best = min(means[(index, policy)] for policy in policies)
                ratios.append(means[(index, DEFAULT_POLICY)] / best)
            charted[trace.name] = ratios
            within = sum(ratio <= 1.05 for ratio in ratios)
            print(
                f"{DEFAULT_POLICY.value} / the best, each replay: "
                + " / ".join(f"{ratio:.2f}" for ratio in ratios)
                + f"; within 5 % in {within} of {len(ratios)}; median "
                f"{statistics.median(ratios):.2f}"
            )
    if args.chart is not None and charted:
        chart(charted, args, args.chart)
    return 0


def chart(ratios: dict[str, list[float]], args: argparse.Namespace, path: Path) -> None:
    """The default's mean time queued over the best policy's, a dot a replay (the trace as
    given filled, jittered ones hollow), a trace a column, the goal's 1.05 as a line."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    names = list(ratios)
    figure, axes = pyplot.subplots(figsize=(max(7.0, 0.75 * len(names) + 2), 4.5))
    for column, name in enumerate(names):
        given, *moved = ratios[name]
        spread = [column + (index - len(moved) / 2) * 0.06 for index in range(len(moved))]
        axes.scatter(spread, moved, facecolors="none", edgecolors="tab:blue", s=28)
        axes.scatter([column], [given], color="tab:blue", s=36)
    axes.axhline(1.05, color="tab:red", linestyle="--", linewidth=1, label="goal: within 5 %")
    axes.set_yscale("log")
    ticks = [1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 8.0]
    top = max(max(values) for values in ratios.values())
    shown = [tick for tick in ticks if tick <= max(top * 1.1, 1.3)]
    axes.set_yticks(shown, [f"{tick:g}x" for tick in shown])
    axes.minorticks_off()
    axes.set_xticks(range(len(names)), [_short(name) for name in names], rotation=40, ha="right")
    axes.set_ylabel(f"{DEFAULT_POLICY.value}'s mean time queued / the best policy's")
    preemption = "every job preemptible" if args.preemption == "yes" else "no preemption"
    axes.set_title(
        f"{DEFAULT_POLICY.value} against the best of {args.policies}, {preemption}; each dot "
        f"a replay\n(filled: the trace as given; hollow: submissions moved by at most "
        f"{args.jitter:g} s)",
        fontsize=10,
    )
    axes.legend(loc="upper left")
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


def _short(name: str) -> str:
    """A trace's name for an axis: generated ones by their seed."""
    if name.startswith("synthetic-") and "-seed" in name:
        return f"generated {name.rsplit('-seed', 1)[1]}"
    return name


if __name__ == "__main__":
    sys.exit(main())
