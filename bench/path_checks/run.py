"""Submit-time path checks: what resolving a submission's paths as its owner costs.

    .venv/bin/python -m bench.path_checks.run [--repeats 200]

A submission with ``working_dir``, ``data_path`` and ``output_path`` set has them and its
allowed roots (home, storage directories) resolved by one child: coreutils' ``realpath``
under ``setpriv`` with the owner's ids (here ``nobody``'s, as root), or, in single-user
mode, ``realpath`` as the portal's own account. Both are timed in a process that has loaded
the portal (Django set up), beside ``os.path.realpath`` in the portal's own process as root,
which is what the check did before (and what let it tell another tenant's names). The goal
is a check that adds under 20 ms to a submission (median).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: python bench/path_checks/run.py
    sys.path.insert(0, str(REPO_ROOT))

GOAL_MS = 20.0
PATHS = ["/home/someone/run1", "/srv/data/imagenet", "/srv/out/run1", "/home/someone"]
ROOTS = ["/srv/vcs/vision/someone", "/srv/vcs/vision/shared", "/srv/vcs/nlp/someone"]


def timed(check: Callable[[], object], repeats: int) -> dict[str, float]:
    """Median and p95 of ``check`` in milliseconds, after one call to warm up."""
    check()
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        check()
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    p95 = timings[min(len(timings) - 1, round(0.95 * len(timings)))]
    return {"median_ms": round(statistics.median(timings), 2), "p95_ms": round(p95, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
    import django

    django.setup()
    from backend.jobs.paths import resolved_as
    from jobmanager.backends.host_accounts import can_switch_users, run_as

    paths = PATHS + ROOTS
    figures: dict[str, dict[str, float]] = {}
    if can_switch_users():
        nobody = pwd.getpwnam("nobody")
        owner = run_as(nobody.pw_uid, nobody.pw_gid, nobody.pw_name)
        figures["as the owner (setpriv + realpath)"] = timed(
            lambda: resolved_as(owner, paths), args.repeats
        )
    figures["as the portal (realpath)"] = timed(lambda: resolved_as(None, paths), args.repeats)
    figures["before: os.path.realpath in the portal"] = timed(
        lambda: [os.path.realpath(path) for path in paths], args.repeats
    )
    for what, figure in figures.items():
        print(f"{what}: median {figure['median_ms']} ms, p95 {figure['p95_ms']} ms")
    worst = max(figure["median_ms"] for figure in figures.values())
    print("goal met" if worst < GOAL_MS else f"goal MISSED ({GOAL_MS} ms)")
    results = REPO_ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "path_checks.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
