"""Golden comparison of replays: every job's times and the report, before and after a change.

    .venv/bin/python -m bench.simulator.same_decisions --write before.json [--jobs 3000]
        [--gpw philly.csv helios.csv] [--synthetic 3000] [--policies FIFO,RF,BF,LAS,FS]
    .venv/bin/python -m bench.simulator.same_decisions --check before.json

Replays the first ``--jobs`` jobs of each Gen-Parallel-Workloads sample given (and a
synthetic trace) under every policy, with and without every job preemptible (as
``bench.simulator.run`` does), and records each job's first start, end, number of starts
and GPU-seconds held, and the run's metrics. ``--write`` saves them; ``--check`` replays
the runs the file names and reports every run whose jobs or metrics differ (exit 1 if
any does). A speed-up of the scheduling core must leave every one of them the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from jobmanager.core.snapshot import Placement, Policy
from jobmanager.simulate import (
    ClusterSpec,
    SyntheticSpec,
    Trace,
    generate,
    load_gpw,
    measure,
    nodes_for_load,
    replay,
    split_quotas,
)
from jobmanager.simulate.engine import ReplayOptions

TARGET_LOAD = 0.8
SYNTHETIC_NODES = 40
UNDECIDED = {"wall_seconds"}  # metrics that time the run rather than tell what it decided


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, help="save the runs' outcomes here")
    action.add_argument("--check", type=Path, help="replay the saved runs and compare")
    parser.add_argument("--jobs", type=int, default=3000, help="first jobs of each sample")
    parser.add_argument("--gpw", nargs="*", default=[], help="Gen-Parallel-Workloads CSVs")
    parser.add_argument("--synthetic", type=int, default=3000, help="synthetic jobs (0: none)")
    parser.add_argument("--policies", default="FIFO,RF,BF,LAS,FS")
    parser.add_argument("--only", default="", help="with --check: runs whose name has this")
    return parser.parse_args(argv)


def options(preemptible: bool) -> ReplayOptions:
    """The options of bench.simulator.run, with and without preemption."""
    if preemptible:
        return ReplayOptions(
            preemptible=True,
            checkpoint_interval=600.0,
            restart_overhead=120.0,
            las_wait_limit=24 * 3600.0,
        )
    return ReplayOptions(las_wait_limit=24 * 3600.0)


def traces(spec: dict[str, Any]) -> dict[str, tuple[Trace, ClusterSpec]]:
    found = {}
    for path in spec["gpw"]:
        full = load_gpw(Path(path))
        trace = Trace(full.name, full.jobs[: spec["jobs"]], full.skipped)
        found[trace.name] = (trace, ClusterSpec(nodes_for_load(trace, TARGET_LOAD)))
    if spec["synthetic"]:
        trace = generate(SyntheticSpec(jobs=spec["synthetic"], vcs=10, seed=1))
        found[trace.name] = (trace, ClusterSpec(SYNTHETIC_NODES))
    return found


def _plain(value: Any) -> Any:
    """JSON for a float that may be NaN or infinite (compared as its repr)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def outcome(trace: Trace, cluster: ClusterSpec, policy: Policy, preemptible: bool) -> dict:
    """What one replay decided: every job's times, and the run's metrics."""
    quotas = split_quotas(trace.gpu_seconds_by_vc(), cluster.gpus)
    cpu = time.process_time()
    run = replay(trace, cluster, quotas, policy, Placement.PACK, options=options(preemptible))
    cpu = time.process_time() - cpu
    return {
        "jobs": [
            list(job)
            for job in zip(
                run.job_ids, run.first_start, run.ended, run.starts, run.held, strict=True
            )
        ],
        "preemptions": run.preemptions,
        "lost_gpu_seconds": run.lost_gpu_seconds,
        "metrics": _plain(dataclasses.asdict(measure(run))),
        "passes": run.passes,  # not a decision: told, not compared
        "cpu_seconds": round(cpu, 2),  # likewise
    }


def differences(before: dict, after: dict) -> list[str]:
    """What differs between two outcomes of the same run (empty: the same decisions)."""
    found = []
    for index, (old, new) in enumerate(zip(before["jobs"], after["jobs"], strict=False)):
        if old != new:
            found.append(f"job #{index} {old[0]}: {old[1:]} before, {new[1:]} now")
            break
    if len(before["jobs"]) != len(after["jobs"]):
        found.append(f"{len(before['jobs'])} jobs before, {len(after['jobs'])} now")
    for key in ("preemptions", "lost_gpu_seconds"):
        if before[key] != after[key]:
            found.append(f"{key}: {before[key]} before, {after[key]} now")
    for key, value in before["metrics"].items():
        if key not in UNDECIDED and after["metrics"].get(key) != value:
            found.append(f"{key}: {value} before, {after['metrics'].get(key)} now")
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check:
        saved = json.loads(args.check.read_text(encoding="utf-8"))
        spec = saved["spec"]
    else:
        spec = {
            "jobs": args.jobs,
            "gpw": args.gpw,
            "synthetic": args.synthetic,
            "policies": args.policies.split(","),
        }
        saved = None
    runs = {}
    failed = 0
    for name, (trace, cluster) in traces(spec).items():
        for policy in spec["policies"]:
            for preemptible in (False, True):
                key = f"{name} {policy}{' preemptible' if preemptible else ''}"
                if args.check and args.only not in key:
                    continue
                now = json.loads(json.dumps(outcome(trace, cluster, Policy(policy), preemptible)))
                runs[key] = now
                line = f"{key}: {now['passes']} passes, {now['cpu_seconds']} s CPU"
                if saved is not None:
                    before = saved["runs"][key]
                    found = differences(before, now)
                    failed += bool(found)
                    verdict = "DIFFERS: " + "; ".join(found) if found else "same"
                    line += f" (before {before['cpu_seconds']} s): {verdict}"
                print(line, flush=True)
    if args.write:
        document = {"spec": spec, "runs": runs}
        args.write.write_text(json.dumps(document) + "\n", encoding="utf-8")
        print(f"wrote {args.write}")
        return 0
    print(f"{len(runs) - failed} of {len(runs)} runs decided the same")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
