"""Scan a storage root: usage per owner (uid), per VC directory and per top-level directory,
file counts and the largest paths, in one walk.

The walk uses ``os.scandir`` with an explicit stack (no recursion limit), never follows a
symlink, never crosses into another filesystem, and counts a hard-linked file once (by
``st_dev``/``st_ino``). Sizes are disk usage (``st_blocks * 512``, as ``du``) and apparent
size (``st_size``).
"""

from __future__ import annotations

import heapq
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from storagemanager.paths import check_root

PROGRESS_EVERY_FILES = 50_000


@dataclass
class Usage:
    """What one owner, VC or directory holds."""

    bytes: int = 0  # on disk
    apparent_bytes: int = 0
    files: int = 0  # files, symlinks and the like; directories are not counted

    def add(self, disk: int, apparent: int, files: int) -> None:
        self.bytes += disk
        self.apparent_bytes += apparent
        self.files += files


@dataclass(frozen=True)
class LargePath:
    path: str  # relative to the root
    bytes: int
    uid: int
    top: str  # the top-level directory it is under ("" at the root itself)
    vc: str  # the VC directory it is under ("" for none)


@dataclass
class ScanResult:
    root: str
    started: float
    finished: float = 0.0
    total: Usage = field(default_factory=Usage)
    directories: int = 0
    by_uid: dict[int, Usage] = field(default_factory=dict)
    by_top: dict[str, Usage] = field(default_factory=dict)
    by_vc: dict[str, Usage] = field(default_factory=dict)
    by_vc_uid: dict[tuple[str, int], Usage] = field(default_factory=dict)
    largest: list[LargePath] = field(default_factory=list)
    skipped_mounts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


Progress = Callable[[int, int], None]  # (files seen, bytes seen)


def scan_root(
    root: str,
    vc_parent: str | None = None,
    largest: int = 20,
    progress: Progress | None = None,
    progress_every: int = PROGRESS_EVERY_FILES,
) -> ScanResult:
    """Walk ``root`` once. ``vc_parent`` is the directory (relative to the root, "" for the
    root itself) whose children are named after VCs; ``None`` when VCs own no directory."""
    root_dev = check_root(root).st_dev
    root = os.path.normpath(root)
    result = ScanResult(root=root, started=time.time())
    seen_links: set[tuple[int, int]] = set()
    heap: list[tuple[int, str, int, str, str]] = []  # the `largest` biggest files so far
    by_uid, by_top, by_vc, total = result.by_uid, result.by_top, result.by_vc, result.total
    by_vc_uid = result.by_vc_uid
    vc_parent_path = (
        os.path.normpath(os.path.join(root, vc_parent)) if vc_parent is not None else None
    )
    prefix = len(root) + 1
    next_progress = progress_every
    # (directory path, its top-level directory name, its VC name)
    stack: list[tuple[str, str, str]] = [(root, "", "")]
    while stack:
        directory, top, vc = stack.pop()
        try:
            entries = os.scandir(directory)
        except OSError as error:
            result.errors.append(f"{directory}: {error.strerror}")
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError as error:
                    result.errors.append(f"{entry.path}: {error.strerror}")
                    continue
                mode = info.st_mode
                if stat.S_ISDIR(mode):
                    if info.st_dev != root_dev:
                        result.skipped_mounts.append(entry.path)
                        continue
                    result.directories += 1
                    child_top = top or entry.name
                    child_vc = vc or (entry.name if directory == vc_parent_path else "")
                    stack.append((entry.path, child_top, child_vc))
                    # A directory's own blocks count for its owner, as du counts them.
                if info.st_nlink > 1 and not stat.S_ISDIR(mode):
                    key = (info.st_dev, info.st_ino)
                    if key in seen_links:
                        continue
                    seen_links.add(key)
                counted = 0 if stat.S_ISDIR(mode) else 1  # files: everything but directories
                disk = info.st_blocks * 512
                apparent = info.st_size
                uid = info.st_uid
                usage = by_uid.get(uid)
                if usage is None:
                    usage = by_uid[uid] = Usage()
                usage.add(disk, apparent, counted)
                total.add(disk, apparent, counted)
                entry_top = top or entry.name
                usage = by_top.get(entry_top)
                if usage is None:
                    usage = by_top[entry_top] = Usage()
                usage.add(disk, apparent, counted)
                entry_vc = vc
                if not entry_vc and directory == vc_parent_path and stat.S_ISDIR(mode):
                    entry_vc = entry.name
                if entry_vc:
                    usage = by_vc.get(entry_vc)
                    if usage is None:
                        usage = by_vc[entry_vc] = Usage()
                    usage.add(disk, apparent, counted)
                    usage = by_vc_uid.get((entry_vc, uid))
                    if usage is None:
                        usage = by_vc_uid[entry_vc, uid] = Usage()
                    usage.add(disk, apparent, counted)
                if not stat.S_ISDIR(mode) and largest:
                    if len(heap) < largest:
                        heapq.heappush(heap, (disk, entry.path, uid, entry_top, entry_vc))
                    elif disk > heap[0][0]:
                        heapq.heappushpop(heap, (disk, entry.path, uid, entry_top, entry_vc))
                if progress is not None and total.files >= next_progress:
                    next_progress += progress_every
                    progress(total.files, total.bytes)
    result.largest = [
        LargePath(path[prefix:], size, uid, entry_top, entry_vc)
        for size, path, uid, entry_top, entry_vc in sorted(heap, reverse=True)
    ]
    result.finished = time.time()
    if progress is not None:
        progress(total.files, total.bytes)
    return result
