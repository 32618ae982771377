"""Storage scan benchmark: the storage manager's scan of 1,000,000 files against ``du -s``
over the same tree, in the same run.

    .venv/bin/python -m bench.storage_scan.run [--files 1000000] [--dir DIR] [--repeats 5]

The tree is generated once (with a progress bar; a few minutes on a slow disk) into
``--dir`` (default ``var/bench/storage-tree``) and reused while its file count matches:
10 VC directories x 10 users x 10 runs x N/1000 files, 1 % of them 4-64 KiB, the rest
empty, plus a hard link and a symlink per run directory. Both walks then run alternately
``--repeats`` times on the warm cache (the file server's metadata cache is warm too in
production, where scans run daily); the median of each is compared. The goal is the scan
within 2x of ``du``'s time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO_ROOT))

from storagemanager.scan import scan_root  # noqa: E402

VCS, USERS, RUNS = 10, 10, 10
MARKER = ".trainyard-bench-files"


def generate(tree: Path, files: int) -> None:
    """The tree, unless one with this many files is there already."""
    marker = tree / MARKER
    if marker.exists() and marker.read_text().strip() == str(files):
        print(f"Reusing the tree of {files:,} files in {tree}")
        return
    if tree.exists():
        shutil.rmtree(tree)
    per_run = files // (VCS * USERS * RUNS)
    rng = random.Random(1)
    with tqdm(total=VCS * USERS * RUNS * per_run, unit="file", desc="Generating") as bar:
        for vc in range(VCS):
            for user in range(USERS):
                for run in range(RUNS):
                    directory = tree / "vcs" / f"vc{vc}" / f"user{user}" / f"run{run}"
                    directory.mkdir(parents=True)
                    for index in range(per_run):
                        fd = os.open(f"{directory}/f{index:05d}", os.O_WRONLY | os.O_CREAT, 0o644)
                        if rng.random() < 0.01:
                            os.write(fd, b"\0" * rng.randrange(4096, 65536))
                        os.close(fd)
                    os.link(directory / "f00000", directory / "hardlink")
                    (directory / "symlink").symlink_to("/etc")
                    bar.update(per_run)
    marker.write_text(str(files))


def time_du(tree: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["du", "-s", str(tree)], check=True, capture_output=True)
    return time.perf_counter() - started


def time_scan(tree: Path) -> tuple[float, int]:
    started = time.perf_counter()
    result = scan_root(str(tree), vc_parent="vcs")
    return time.perf_counter() - started, result.total.files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / "var" / "bench" / "storage-tree")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    generate(args.dir, args.files)
    time_du(args.dir)  # warm the cache for both
    du_times, scan_times = [], []
    for repeat in range(args.repeats):
        du_times.append(time_du(args.dir))
        seconds, counted = time_scan(args.dir)
        scan_times.append(seconds)
        print(f"run {repeat + 1}: du -s {du_times[-1]:.2f} s, scan {seconds:.2f} s "
              f"({counted:,} files)")  # fmt: skip
    du_median, scan_median = statistics.median(du_times), statistics.median(scan_times)
    ratio = scan_median / du_median
    print(f"median: du -s {du_median:.2f} s, scan {scan_median:.2f} s: "
          f"{ratio:.2f}x du (goal: within 2x) {'PASS' if ratio <= 2 else 'FAIL'}")  # fmt: skip
    results = REPO_ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "storage_scan.json").write_text(
        json.dumps(
            {"files": args.files, "du_seconds": du_times, "scan_seconds": scan_times,
             "ratio": ratio}, indent=2,
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()
