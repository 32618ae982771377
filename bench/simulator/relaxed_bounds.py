"""What any scheduler could reach on a trace: a relaxed replay that favours the policy.

The cluster is a pool of GPUs (no nodes, so a gang never waits for whole nodes to drain)
and preemption is free (no lost work, no restart time); every job may be preempted. The
scheduler decides every ``--step`` seconds. Policies:

- ``FIFO``: non-preemptive, in submission order, stopping at the first job that does not
  fit (the simulator's FIFO; the relaxation changes its figures by under 3 %);
- ``LAS``: least attained service with one boundary (``--las-boundary`` GPU-seconds),
  submission order within a queue, preemptive;
- ``SRPT``: shortest remaining GPU-time first, preemptive, knowing every duration (the
  oracle: the lowest mean time in system);
- ``GITTINS``: the Gittins index of each job's attained service under its GPU count's
  duration distribution (Tiresias with known distributions; the optimal order for the
  mean among policies that do not know durations), taken from the trace itself;
- ``GITTINS@L``: the same, but a job queued ``L`` seconds in all goes first, in
  submission order (a wait limit).

Each run reports both readings of a wait: until the first start (``wait``) and every
wait together (``queued``: the JCT less the run time). A policy that fails the issue's
bounds here fails them in the real simulator too, whose nodes and preemption costs only
add to the waits.

    .venv/bin/python -m bench.simulator.relaxed_bounds /work/shared/traces/itp/cluster0[1245].csv
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from jobmanager.simulate.cluster import nodes_for_load
from jobmanager.simulate.loaders import load_itp

GPUS_PER_NODE = 8
DEFAULT_LIMITS = (100_000.0, 200_000.0, 400_000.0, 700_000.0, 900_000.0)


@dataclass(frozen=True)
class Jobs:
    """A trace's jobs in submission order, as arrays."""

    submitted: np.ndarray
    duration: np.ndarray
    gpus: np.ndarray

    def __len__(self) -> int:
        return len(self.submitted)


@dataclass(frozen=True)
class Outcome:
    """Per-job first starts and ends of one replay."""

    first_start: np.ndarray
    ended: np.ndarray


@dataclass(frozen=True)
class Figures:
    mean_wait: float  # seconds to the first start
    longest_wait: float
    mean_queued: float  # seconds of every wait together
    longest_queued: float
    p95_jct: float

    @classmethod
    def of(cls, jobs: Jobs, outcome: Outcome) -> Figures:
        wait = outcome.first_start - jobs.submitted
        queued = outcome.ended - jobs.submitted - jobs.duration
        jct = outcome.ended - jobs.submitted
        return cls(
            float(wait.mean()),
            float(wait.max()),
            float(queued.mean()),
            float(queued.max()),
            float(np.percentile(jct, 95)),
        )

    def meets(self, fifo: Figures, counting_every_wait: bool) -> bool:
        """The issue's goal: mean at most half FIFO's, p95 JCT no worse, longest at most
        1.5x FIFO's longest."""
        mean, longest = (
            (self.mean_queued, self.longest_queued)
            if counting_every_wait
            else (self.mean_wait, self.longest_wait)
        )
        return (
            mean <= 0.5 * fifo.mean_wait
            and self.p95_jct <= fifo.p95_jct
            and longest <= 1.5 * fifo.longest_wait
        )


Priority = Callable[[np.ndarray, np.ndarray, float], np.ndarray]  # ids, attained, now


def replay(jobs: Jobs, gpus: int, step: float, priority: Priority | None) -> Outcome:
    """Run the trace on a pool of ``gpus`` GPUs. ``priority`` (lower first) reorders the
    jobs in the system every step and preempts freely; None: FIFO, non-preemptive."""
    count = len(jobs)
    attained = np.zeros(count)  # seconds run
    running = np.zeros(count, dtype=bool)
    done = np.zeros(count, dtype=bool)
    first_start = np.full(count, np.nan)
    ended = np.full(count, np.nan)
    now = float(jobs.submitted[0])
    while not done.all():
        present = np.nonzero((jobs.submitted <= now) & ~done)[0]
        if priority is None:
            free = gpus - int(jobs.gpus[running].sum())
            for job in present:
                if running[job]:
                    continue
                if jobs.gpus[job] > free:
                    break
                running[job] = True
                free -= int(jobs.gpus[job])
        else:
            running[:] = False
            free = gpus
            order = present[np.argsort(priority(present, attained[present], now), kind="stable")]
            for job in order:
                if jobs.gpus[job] <= free:
                    running[job] = True
                    free -= int(jobs.gpus[job])
        started = np.nonzero(running)[0]
        first_start[started] = np.where(np.isnan(first_start[started]), now, first_start[started])
        attained[started] += step
        finished = started[attained[started] >= jobs.duration[started]]
        ended[finished] = now + step - (attained[finished] - jobs.duration[finished])
        done[finished] = True
        running[finished] = False
        now += step
        if not running.any() and not ((jobs.submitted <= now) & ~done).any() and not done.all():
            now = max(now, float(jobs.submitted[~done].min()))
    return Outcome(first_start, ended)


def gittins_indices(durations: np.ndarray, step: float) -> np.ndarray:
    """The Gittins index (completion chance per second of service spent) at every
    multiple of ``step`` of attained service, for jobs of these durations."""
    ordered = np.sort(durations)
    ages = np.arange(0.0, ordered[-1] + step, step)
    indices = np.empty(len(ages))
    for index, age in enumerate(ages):
        alive = ordered[ordered > age]
        if len(alive) == 0:
            indices[index] = np.inf
            continue
        # Serving up to each remaining job's end: the chance of finishing by then over
        # the service it is expected to take.
        served = np.arange(1, len(alive) + 1)
        expected = (np.cumsum(alive - age) + (len(alive) - served) * (alive - age)) / len(alive)
        indices[index] = np.max(served / len(alive) / np.maximum(expected, 1.0))
    return indices


def gittins(jobs: Jobs, step: float, limit: float | None) -> Priority:
    """Highest Gittins index per GPU first; with a limit, jobs queued that long first."""
    tables = {}
    for size in np.unique(jobs.gpus):
        same = jobs.duration[jobs.gpus == size]
        tables[int(size)] = gittins_indices(same if len(same) >= 20 else jobs.duration, step)

    def priority(ids: np.ndarray, attained: np.ndarray, now: float) -> np.ndarray:
        key = np.empty(len(ids))
        sizes = jobs.gpus[ids]
        for size in np.unique(sizes):
            mine = sizes == size
            table = tables[int(size)]
            ages = np.minimum((attained[mine] // step).astype(int), len(table) - 1)
            key[mine] = -table[ages] / size
        if limit is not None:
            queued = now - jobs.submitted[ids] - attained
            key = np.where(queued >= limit, -1e18 + jobs.submitted[ids], key)
        return key

    return priority


def policies(
    jobs: Jobs, step: float, las_boundary: float, limits: Sequence[float]
) -> dict[str, Priority | None]:
    def las(ids: np.ndarray, attained: np.ndarray, now: float) -> np.ndarray:
        return (attained * jobs.gpus[ids] >= las_boundary).astype(float)

    def srpt(ids: np.ndarray, attained: np.ndarray, now: float) -> np.ndarray:
        return (jobs.duration[ids] - attained) * jobs.gpus[ids]

    runs: dict[str, Priority | None] = {"FIFO": None, "LAS": las, "SRPT": srpt}
    runs["GITTINS"] = gittins(jobs, step, None)
    for limit in limits:
        runs[f"GITTINS@{limit / 3600:.0f}h"] = gittins(jobs, step, limit)
    return runs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", metavar="FILE.csv", help="ITP trace files")
    parser.add_argument("--target-load", type=float, default=0.8)
    parser.add_argument("--step", type=float, default=600.0, help="seconds between decisions")
    parser.add_argument("--las-boundary", type=float, default=21_600.0, metavar="GPU_SECONDS")
    parser.add_argument(
        "--limits",
        type=lambda text: [float(part) for part in text.split(",") if part],
        default=list(DEFAULT_LIMITS),
        metavar="SECONDS,...",
        help="wait limits for GITTINS@L",
    )
    args = parser.parse_args(argv)
    print(
        "| cluster | policy | mean wait | mean queued | p95 JCT | longest wait | longest queued "
        "| met by first start | met counting every wait |  (FIFO's figures, then each policy's"
        " over FIFO's)"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.traces:
        trace = load_itp([path])
        jobs = Jobs(
            np.array([job.submitted for job in trace.jobs]),
            np.array([job.duration for job in trace.jobs]),
            np.array([job.gpus for job in trace.jobs]),
        )
        gpus = nodes_for_load(trace, args.target_load, GPUS_PER_NODE) * GPUS_PER_NODE
        fifo: Figures | None = None
        for name, priority in policies(jobs, args.step, args.las_boundary, args.limits).items():
            figures = Figures.of(jobs, replay(jobs, gpus, args.step, priority))
            if fifo is None:
                fifo = figures
                print(
                    f"| {trace.name} ({gpus} GPUs) | FIFO "
                    f"| {figures.mean_wait / 60:,.0f} min | {figures.mean_queued / 60:,.0f} min "
                    f"| {figures.p95_jct / 3600:.1f} h | {figures.longest_wait / 3600:.1f} h "
                    f"| {figures.longest_queued / 3600:.1f} h | | |",
                    flush=True,
                )
                continue
            print(
                f"| {trace.name} ({gpus} GPUs) | {name} "
                f"| {figures.mean_wait / fifo.mean_wait:.2f} "
                f"| {figures.mean_queued / fifo.mean_wait:.2f} "
                f"| {figures.p95_jct / fifo.p95_jct:.2f} "
                f"| {figures.longest_wait / fifo.longest_wait:.2f} "
                f"| {figures.longest_queued / fifo.longest_wait:.2f} "
                f"| {'yes' if figures.meets(fifo, False) else 'no'} "
                f"| {'yes' if figures.meets(fifo, True) else 'no'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
