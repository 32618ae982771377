"""The command line's arguments: one subcommand per trace source, the same cluster and run
options for each."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from jobmanager.core.snapshot import RF_STARVATION_SECONDS, Placement, Policy
from jobmanager.simulate.engine import ReplayOptions
from jobmanager.simulate.synthetic import SyntheticSpec

DEFAULT_TARGET_LOAD = 0.8


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m jobmanager.simulate",
        description=(
            "Replay a GPU job trace on a simulated cluster with the scheduling core, under "
            "each policy (FIFO; RF = runnable first; BF = backfill with reservations; LAS = "
            "least attained service; FS = fair share) and placement (pack, spread), and "
            "compare job completion time, queueing delay, utilisation and preemptions. "
            "The cluster's GPUs are split into VC quotas in proportion to each VC's offered "
            "GPU-seconds; idle quota is borrowed, and preempted when its VC needs it back. "
            "Jobs larger than a node run as gangs of whole nodes."
        ),
        epilog=(
            "examples:\n"
            "  python -m jobmanager.simulate itp /work/shared/traces/itp/cluster04.csv "
            "--target-load 0.8\n"
            "  python -m jobmanager.simulate philly cluster_job_log.json --nodes 50\n"
            "  python -m jobmanager.simulate gpw philly_data_training.csv --target-load 0.8\n"
            "  python -m jobmanager.simulate synthetic --jobs 100000 --vcs 10 --seed 1 "
            "--nodes 250\n"
            "Each subcommand has its own --help."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sources = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    itp = sources.add_parser(
        "itp",
        help="Microsoft ITP CSV traces (one VC per file)",
        description="Microsoft ITP traces: job_id,submission_time,duration,num_gpu. "
        "Each file becomes one VC of a shared cluster, named after the file.",
    )
    itp.add_argument("files", nargs="+", type=Path, metavar="FILE.csv")
    philly = sources.add_parser(
        "philly",
        help="a Microsoft Philly cluster_job_log (JSON)",
        description="A Microsoft Philly cluster_job_log: VCs from each job's 'vc'; GPUs and "
        "duration from its last attempt.",
    )
    philly.add_argument("file", type=Path, metavar="FILE.json")
    gpw = sources.add_parser(
        "gpw",
        help="a Gen-Parallel-Workloads CSV (the public Philly and Helios samples, with users)",
        description="DIR-LAB's Gen-Parallel-Workloads CSV: u_id,user,gpu_num,cpu_num,node_num,"
        "interval,run_time,wall_time,new_status. Submission = the sum of the intervals; one VC "
        "named after the file; jobs with no GPUs are skipped.",
    )
    gpw.add_argument("file", type=Path, metavar="FILE.csv")
    synthetic = sources.add_parser(
        "synthetic",
        help="a seeded synthetic trace",
        description="Poisson arrivals, log-normal durations, mostly 1-GPU jobs; VC i gets a "
        "share of the jobs in proportion to 1/(i+1).",
    )
    synthetic.add_argument("--jobs", type=_at_least(0), default=10_000, help="default 10000")
    synthetic.add_argument("--vcs", type=_at_least(1), default=4, help="default 4")
    synthetic.add_argument("--seed", type=int, default=1, help="default 1")
    synthetic.add_argument(
        "--mean-interarrival",
        type=_positive_float,
        default=SyntheticSpec.mean_interarrival,
        metavar="SECONDS",
        help="mean time between submissions (default %(default)s)",
    )
    synthetic.add_argument(
        "--median-duration",
        type=_positive_float,
        default=SyntheticSpec.median_duration,
        metavar="SECONDS",
        help="median job run time (default %(default)s)",
    )
    for subparser in (itp, philly, gpw, synthetic):
        _add_common_options(subparser)
    args = parser.parse_args(argv)
    if args.compare:
        args.policies, args.placements = list(Policy), list(Placement)
    if args.nodes is None and args.target_load is None:
        args.target_load = DEFAULT_TARGET_LOAD
    return args


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    size = parser.add_argument_group("cluster size (one of)")
    sizing = size.add_mutually_exclusive_group()
    sizing.add_argument("--nodes", type=_at_least(1), help="number of nodes")
    sizing.add_argument(
        "--target-load",
        type=_positive_float,
        metavar="LOAD",
        help="size the cluster so that the trace's GPU-seconds over its submission span "
        f"fill this share of its GPUs, but no smaller than its largest job (default "
        f"{DEFAULT_TARGET_LOAD})",
    )
    size.add_argument("--gpus-per-node", type=_at_least(1), default=8, help="default 8")
    size.add_argument("--gpu-type", default="A100", help="default A100")
    size.add_argument(
        "--nodes-per-switch",
        type=_at_least(1),
        default=0,
        metavar="N",
        help="nodes under each network switch, in order (default: one flat network)",
    )
    runs = parser.add_argument_group("runs")
    runs.add_argument(
        "--policies",
        type=_choices(Policy, upper=True),
        default=list(Policy),
        metavar="FIFO,RF,BF,LAS,FS",
        help="queue policies to compare (default all)",
    )
    runs.add_argument(
        "--compare",
        action="store_true",
        help="every policy with pack and spread, side by side (overrides --policies and "
        "--placements)",
    )
    runs.add_argument(
        "--placements",
        type=_choices(Placement, upper=False),
        default=list(Placement),
        metavar="pack,spread",
        help="placements to compare (default both)",
    )
    runs.add_argument(
        "--limit", type=_at_least(1), metavar="N", help="only the first N jobs to be submitted"
    )
    runs.add_argument(
        "--interval",
        type=_non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="run the scheduler only at multiples of this (0, the default: at every event)",
    )
    runs.add_argument(
        "--starvation-seconds",
        type=_non_negative_float,
        default=RF_STARVATION_SECONDS,
        help="RF lets smaller jobs by a waiting one for this long (default %(default)s)",
    )
    runs.add_argument(
        "--output",
        type=Path,
        metavar="DIR",
        help="where to write comparison.csv/.json/.png (default var/simulations/<timestamp>)",
    )
    runs.add_argument(
        "--workers",
        type=_at_least(1),
        default=1,
        help="replay this many runs at once, in separate processes (default 1)",
    )
    runs.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    jobs = parser.add_argument_group("jobs and policies")
    jobs.add_argument(
        "--borrowing",
        choices=("on", "off"),
        default="on",
        help="VCs lend idle quota to others (default on)",
    )
    jobs.add_argument(
        "--fair-lending",
        action="store_true",
        help="lend idle GPUs to the VC borrowing least for its quota first",
    )
    jobs.add_argument(
        "--preemptible",
        action="store_true",
        help="every trace job may be preempted (LAS preempts only preemptible work)",
    )
    jobs.add_argument(
        "--checkpoint-interval",
        type=_positive_float,
        metavar="SECONDS",
        help="jobs checkpoint this often: a preempted job loses only the work since its last "
        "checkpoint (default: none, it loses all it ran)",
    )
    jobs.add_argument(
        "--restart-overhead",
        type=_non_negative_float,
        default=ReplayOptions.restart_overhead,
        metavar="SECONDS",
        help="a preempted job, started again, holds its GPUs this long before it makes "
        "progress (default %(default)s)",
    )
    jobs.add_argument(
        "--straddle-slowdown",
        type=_positive_float,
        default=ReplayOptions.straddle_slowdown,
        metavar="FACTOR",
        help="a gang under more than one network switch runs this many times slower "
        "(with --nodes-per-switch; default %(default)s)",
    )
    jobs.add_argument(
        "--same-switch",
        action="store_true",
        help="every gang that fits under one network switch waits for room under one "
        "(with --nodes-per-switch)",
    )
    jobs.add_argument(
        "--switch-blind",
        action="store_true",
        help="placement is not told the switches (to measure what topology-aware placement "
        "saves; with --nodes-per-switch)",
    )
    jobs.add_argument(
        "--oracle",
        action="store_true",
        help="backfill knows every duration in advance (else: learned from ended jobs)",
    )
    jobs.add_argument(
        "--las-thresholds",
        type=_float_list,
        default=ReplayOptions.las_thresholds,
        metavar="GPU_SECONDS,...",
        help="attained GPU-seconds at which LAS moves a job down a queue",
    )
    jobs.add_argument(
        "--las-quantum",
        type=_non_negative_float,
        default=ReplayOptions.las_quantum,
        metavar="SECONDS",
        help="LAS does not preempt a job again before it ran this long (default %(default)s)",
    )
    jobs.add_argument(
        "--las-starve-factor",
        type=_non_negative_float,
        default=ReplayOptions.las_starve_factor,
        help="a preempted job goes back to LAS's first queue after waiting this many times "
        "what it ran (default %(default)s)",
    )
    jobs.add_argument(
        "--las-starvation-seconds",
        type=_non_negative_float,
        default=ReplayOptions.las_starvation_seconds,
        metavar="SECONDS",
        help="and after waiting at least this long (default %(default)s)",
    )
    jobs.add_argument(
        "--las-wait-limit",
        type=_positive_float,
        metavar="SECONDS",
        help="a job queued this long in all (every wait after a preemption included) goes "
        "first under LAS and may preempt any job that has not (default: no limit)",
    )
    jobs.add_argument(
        "--las-wait-factor",
        type=_positive_float,
        metavar="FACTOR",
        help="the LAS wait limit is at least FACTOR x what the work queued and running "
        "ahead of a job at its submission gives it to wait (default: not scaled)",
    )
    jobs.add_argument(
        "--las-limit-preempted-only",
        action="store_true",
        help="the LAS wait limit binds only jobs that have run before (preempted ones)",
    )
    jobs.add_argument(
        "--las-within-queue",
        action="store_true",
        help="LAS serves each queue in submission order, preemptively: a job may preempt "
        "the jobs of its own queue submitted after it",
    )
    jobs.add_argument(
        "--deadline-factor",
        type=_positive_float,
        metavar="FACTOR",
        help="give each job the deadline submission + FACTOR x its duration",
    )
    jobs.add_argument(
        "--largest-fit-first",
        action="store_true",
        help="backfill starts first, of the jobs that fit now, the largest",
    )
    jobs.add_argument(
        "--bursts",
        type=_positive_float,
        metavar="SECONDS",
        help="backfill ranks submission bursts (same VC, user and size, each job within "
        "SECONDS of the one before) by the service their started jobs have shown",
    )
    jobs.add_argument(
        "--burst-guard",
        type=_positive_float,
        default=ReplayOptions.burst_guard,
        metavar="SECONDS",
        help="with --bursts, a job that waited this long goes back to queue order "
        "(default %(default)s)",
    )


def replay_options(args: argparse.Namespace) -> ReplayOptions:
    return ReplayOptions(
        borrowing=args.borrowing == "on",
        fair_lending=args.fair_lending,
        preemptible=args.preemptible,
        checkpoint_interval=args.checkpoint_interval,
        restart_overhead=args.restart_overhead,
        oracle=args.oracle,
        las_thresholds=tuple(args.las_thresholds),
        las_quantum=args.las_quantum,
        las_starve_factor=args.las_starve_factor,
        las_starvation_seconds=args.las_starvation_seconds,
        las_wait_limit=args.las_wait_limit,
        las_wait_factor=args.las_wait_factor,
        las_limit_preempted_only=args.las_limit_preempted_only,
        las_within_queue=args.las_within_queue,
        deadline_factor=args.deadline_factor,
        bursts=args.bursts,
        largest_fit_first=args.largest_fit_first,
        burst_guard=args.burst_guard,
        straddle_slowdown=args.straddle_slowdown,
        same_switch=args.same_switch,
        topology_aware=not args.switch_blind,
    )


def _float_list(text: str) -> tuple[float, ...]:
    values = tuple(_non_negative_float(part.strip()) for part in text.split(",") if part.strip())
    if list(values) != sorted(values):
        raise argparse.ArgumentTypeError("thresholds must be in increasing order")
    return values


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, not {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def _choices(kind: type[StrEnum], upper: bool) -> Callable[[str], list[Any]]:
    """A comma-separated list of an enum's values, in any case, without repeats."""

    def parse(text: str) -> list[Any]:
        chosen = []
        for name in (part.strip() for part in text.split(",")):
            value = name.upper() if upper else name.lower()
            if value not in {member.value for member in kind}:
                known = ",".join(member.value for member in kind)
                raise argparse.ArgumentTypeError(f"{name!r} is not one of {known}")
            if kind(value) not in chosen:
                chosen.append(kind(value))
        return chosen

    return parse
