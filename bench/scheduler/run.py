"""Scheduling-core benchmark: one full pass, and a start-time estimate, on a large cluster.

    .venv/bin/python -m bench.scheduler.run [--repeats 7] [--seed 1] [--profile]
        [--dedicated-nodes N]

Builds a snapshot of 1,000 nodes x 8 A100 GPUs, 50 VCs (half FIFO, half runnable first)
whose quotas add up to the cluster, a running set that keeps 70-90% of the GPUs busy
(with real placements; some VCs beyond their quota, borrowing) and 10,000 queued jobs
(mostly 1 GPU, some 2, 4 and 8, some 2 x 8 and 4 x 8 gangs). Times ``schedule()`` (median
and worst of the repeats) and ``estimate_start_times()``, and prints the numbers of
starts, preemptions and waits. The goal is a pass under 0.5 s on two cores. With
``--dedicated-nodes N``, every tenth node up to N is dedicated to one of the VCs in turn,
and every other VC lends its dedicated nodes (so that every queued job's shape is
rewritten: the costliest case).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: python bench/scheduler/run.py
    sys.path.insert(0, str(REPO_ROOT))

from jobmanager.core.placement import ClusterState  # noqa: E402
from jobmanager.core.scheduler import schedule  # noqa: E402
from jobmanager.core.snapshot import (  # noqa: E402
    Decisions,
    JobShape,
    NodeState,
    Policy,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    VcState,
)
from jobmanager.core.timeline import estimate_start_times  # noqa: E402

GOAL_SECONDS = 0.5
GIB = 1024
NODES = 1_000
GPUS_PER_NODE = 8
VCS = 50
QUEUED = 10_000
HOUR = 3600.0
NOW = 1_000_000.0
# (workers, GPUs per worker): share of jobs
SIZE_MIX = {
    (1, 1): 0.60,
    (1, 2): 0.14,
    (1, 4): 0.10,
    (1, 8): 0.09,
    (2, 8): 0.05,
    (4, 8): 0.02,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="passes to time")
    parser.add_argument("--estimate-repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--busy", type=float, default=0.8, help="share of GPUs running jobs")
    parser.add_argument("--profile", action="store_true", help="cProfile one pass")
    parser.add_argument("--dedicated-nodes", type=int, default=0, help="nodes bound to VCs")
    return parser.parse_args(argv)


def build_snapshot(seed: int, busy: float) -> Snapshot:
    """The benchmark's cluster, VCs, running jobs and queue (the same for a given seed)."""
    rng = random.Random(seed)
    nodes = tuple(
        NodeState(
            name=f"node-{index:04d}",
            gpu_type="A100",
            capacity=Resources(
                GPUS_PER_NODE,
                rng.choice([96, 112, 128]) * 1000,
                rng.choice([1024, 1536, 2048]) * GIB,
            ),
            labels=(("rack", f"r{index // 40:02d}"),),
            schedulable=rng.random() > 0.01,  # about ten cordoned or in repair
        )
        for index in range(NODES)
    )
    vcs = _vcs(rng)
    running = _running(rng, nodes, vcs, busy)
    queued = _queued(rng, vcs)
    return Snapshot(now=NOW, nodes=nodes, vcs=vcs, running=running, queued=queued)


def _vcs(rng: random.Random) -> tuple[VcState, ...]:
    """50 VCs whose GPU quotas add up to the cluster's GPUs (CPU and memory in proportion)."""
    total = NODES * GPUS_PER_NODE
    weights = [rng.lognormvariate(0, 0.8) for _ in range(VCS)]
    quotas = [max(8, int(total * weight / sum(weights))) for weight in weights]
    quotas[quotas.index(max(quotas))] += total - sum(quotas)
    return tuple(
        VcState(
            name=f"vc-{index:02d}",
            quota={"A100": Resources(gpus, gpus * 14 * 1000, gpus * 200 * GIB)},
            policy=Policy.FIFO if index % 2 == 0 else Policy.RF,
            max_interactive_gpus=rng.choice([None, None, 8, 16]),
        )
        for index, gpus in enumerate(quotas)
    )


def _shape(rng: random.Random) -> JobShape:
    ((workers, gpus),) = rng.choices(list(SIZE_MIX), weights=list(SIZE_MIX.values()))
    return JobShape(
        gpu_type="A100",
        workers=workers,
        per_worker=Resources(gpus, gpus * rng.choice([6, 8, 10, 12]) * 1000, gpus * 96 * GIB),
    )


def _running(
    rng: random.Random, nodes: tuple[NodeState, ...], vcs: tuple[VcState, ...], busy: float
) -> tuple[RunningJob, ...]:
    """Jobs placed (packed) until the share ``busy`` of the GPUs is taken. VCs submit at
    rates that do not follow their quotas, so that some run beyond them (borrowing)."""
    cluster = ClusterState(nodes)
    target = busy * NODES * GPUS_PER_NODE
    appetite = [vc.quota["A100"].gpus * rng.uniform(0.3, 2.5) for vc in vcs]
    guaranteed: Counter[str] = Counter()
    running: list[RunningJob] = []
    taken = misses = 0
    while taken < target and misses < 200:
        shape = _shape(rng)
        placement = cluster.place(shape)
        if placement is None:
            misses += 1
            continue
        vc = rng.choices(vcs, weights=appetite)[0]
        preemptible = rng.random() < 0.05
        within = guaranteed[vc.name] + shape.total.gpus <= vc.quota["A100"].gpus
        if within and not preemptible:
            guaranteed[vc.name] += shape.total.gpus
        started_at = NOW - rng.uniform(0, 48 * HOUR)
        running.append(
            RunningJob(
                id=f"run-{len(running):05d}",
                vc=vc.name,
                shape=shape,
                placement=placement,
                started_at=started_at,
                priority=rng.choice([0, 0, 0, 1, 2]),
                preemptible=preemptible,
                borrowing=not within,
                interactive=shape.total.gpus <= 2 and rng.random() < 0.05,
                releasing=rng.random() < 0.005,
                deadline=started_at + rng.choice([24, 72, 168]) * HOUR,
                queued_at=started_at - rng.uniform(0, 4 * HOUR),
            )
        )
        taken += shape.total.gpus
    return tuple(running)


def _queued(rng: random.Random, vcs: tuple[VcState, ...]) -> tuple[QueuedJob, ...]:
    appetite = [vc.quota["A100"].gpus * rng.uniform(0.2, 3.0) for vc in vcs]
    jobs = []
    for index in range(QUEUED):
        shape = _shape(rng)
        jobs.append(
            QueuedJob(
                id=f"job-{index:05d}",
                vc=rng.choices(vcs, weights=appetite)[0].name,
                shape=shape,
                # Most jobs submitted recently; batches submitted at once share a time.
                queued_at=NOW - float(int(min(rng.expovariate(1 / HOUR), 24 * HOUR)) // 60 * 60),
                priority=rng.choice([0, 0, 0, 0, 1, 2]),
                preemptible=rng.random() < 0.05,
                interactive=shape.total.gpus <= 2 and rng.random() < 0.03,
                max_wall_time=rng.choice([4, 24, 72]) * HOUR,
            )
        )
    return tuple(jobs)


def describe(snapshot: Snapshot) -> str:
    gpus = sum(node.capacity.gpus for node in snapshot.nodes)
    busy = sum(job.shape.total.gpus for job in snapshot.running)
    borrowed = sum(job.shape.total.gpus for job in snapshot.running if job.borrowing)
    queued = sum(job.shape.total.gpus for job in snapshot.queued)
    fifo = sum(vc.policy == Policy.FIFO for vc in snapshot.vcs)
    return (
        f"{len(snapshot.nodes)} nodes, {gpus} GPUs; {len(snapshot.vcs)} VCs ({fifo} FIFO, "
        f"{len(snapshot.vcs) - fifo} RF); {len(snapshot.running)} running jobs holding "
        f"{busy} GPUs ({100 * busy / gpus:.0f}% busy, {borrowed} borrowed); "
        f"{len(snapshot.queued)} queued jobs asking for {queued} GPUs"
    )


def time_passes(snapshot: Snapshot, repeats: int) -> tuple[list[float], Decisions]:
    seconds = []
    decisions = Decisions()
    for _ in range(repeats):
        began = time.perf_counter()
        decisions = schedule(snapshot)
        seconds.append(time.perf_counter() - began)
    return seconds, decisions


def dedicate(snapshot: Snapshot, count: int) -> Snapshot:
    """The snapshot with ``count`` nodes (every tenth) dedicated to the VCs in turn, and
    every other VC lending its own."""
    if count <= 0:
        return snapshot
    step = max(1, len(snapshot.nodes) // count)
    nodes = list(snapshot.nodes)
    for turn, index in enumerate(range(0, len(nodes), step)[:count]):
        vc_name = snapshot.vcs[turn % len(snapshot.vcs)].name
        nodes[index] = replace(nodes[index], dedicated_to=vc_name)
    vcs = tuple(
        replace(vc, lends_dedicated=index % 2 == 0) for index, vc in enumerate(snapshot.vcs)
    )
    print(f"{count} nodes dedicated to {min(count, len(vcs))} VCs, half of them lending")
    return replace(snapshot, nodes=tuple(nodes), vcs=vcs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    snapshot = dedicate(build_snapshot(args.seed, args.busy), args.dedicated_nodes)
    print(describe(snapshot))

    seconds, decisions = time_passes(snapshot, args.repeats)
    median, worst = statistics.median(seconds), max(seconds)
    print(
        f"schedule(): median {median * 1000:.0f} ms, worst {worst * 1000:.0f} ms "
        f"over {args.repeats} passes (goal {GOAL_SECONDS * 1000:.0f} ms)"
    )
    print(
        f"  {len(decisions.starts)} starts "
        f"({sum(start.borrowing for start in decisions.starts)} borrowing), "
        f"{len(decisions.preemptions)} preemptions "
        f"(for {len({p.for_job for p in decisions.preemptions})} jobs), "
        f"{len(decisions.waits)} waits"
    )

    estimates: dict[str, float] = {}
    estimate_seconds = []
    for _ in range(args.estimate_repeats):
        began = time.perf_counter()
        estimates = estimate_start_times(snapshot, default_run_time=4 * HOUR)
        estimate_seconds.append(time.perf_counter() - began)
    if estimate_seconds:
        print(
            f"estimate_start_times(): median {statistics.median(estimate_seconds):.2f} s, "
            f"worst {max(estimate_seconds):.2f} s over {args.estimate_repeats} runs; "
            f"{len(estimates)} of {len(snapshot.queued)} queued jobs given a start time"
        )

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        schedule(snapshot)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return 0 if median < GOAL_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
