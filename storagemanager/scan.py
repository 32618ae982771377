"""Scan a storage root: usage per owner (uid), per VC directory and per top-level directory,
file counts and the largest paths, in one walk.

The walk (:func:`storagemanager.paths.walk`) lists each directory through a descriptor
opened relative to its parent's, never follows a symlink (not even one put in place of a
directory mid-scan), never crosses into another filesystem, and counts a hard-linked file
once (by ``st_dev``/``st_ino``). Sizes are disk usage (``st_blocks * 512``, as ``du``) and apparent
size (``st_size``).
"""

from __future__ import annotations

import heapq
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storagemanager.paths import walk

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
    root itself) whose children are named after VCs; ``None`` when VCs own no directory.

    Each directory is reached through its parent's descriptor (:func:`paths.walk`), so a
    directory swapped for a symlink mid-scan is never followed. Everything in one
    directory shares its top-level directory and VC, so the loop over a directory's
    entries only adds up per uid; the sums go to the totals once per directory (this keeps
    the walk within 2x of ``du``: docs/benchmarks.md)."""
    errors: list[str] = []
    directories = walk(root, errors)  # checks the root as written
    root = os.path.normpath(root)
    result = ScanResult(root=root, started=time.time(), errors=errors)
    seen_links: set[tuple[int, int]] = set()
    heap: list[tuple[int, str, int, str, str]] = []  # the `largest` biggest files so far
    heap_floor = -1 if largest else 1 << 62  # a file must be bigger than this to enter
    vc_prefix = _vc_prefix(vc_parent)
    next_progress = progress_every
    files_seen = bytes_seen = 0
    is_dir = stat.S_ISDIR
    root_dev = -1
    for directory in directories:
        relative = directory.relative
        if not relative:
            root_dev = directory.stat.st_dev
        top = relative.partition("/")[0]
        vc = _vc_of(relative, vc_prefix)
        base = f"{relative}/" if relative else ""
        # Per uid: [bytes on disk, apparent bytes, files]; the directory's own blocks
        # count for its owner, as du counts them (the root's own do not).
        own = directory.stat
        here: dict[int, list[int]] = (
            {own.st_uid: [own.st_blocks * 512, own.st_size, 0]} if relative else {}
        )
        # Listing through the descriptor makes each entry's stat an fstatat relative to
        # it (as du does), not a lookup of the whole path again.
        with os.scandir(directory.fd) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError as error:
                    result.errors.append(f"{root}/{base}{entry.name}: {error.strerror}")
                    continue
                if is_dir(info.st_mode):
                    if info.st_dev != root_dev:
                        result.skipped_mounts.append(f"{root}/{base}{entry.name}")
                    else:
                        directory.enter.append(entry.name)
                    continue
                if info.st_nlink > 1:
                    key = (info.st_dev, info.st_ino)
                    if key in seen_links:
                        continue
                    seen_links.add(key)
                disk = info.st_blocks * 512
                uid = info.st_uid
                if not top:  # a file directly under the root is its own top-level entry
                    _add(result.by_top, entry.name, disk, info.st_size, 1)
                    _add(result.by_uid, uid, disk, info.st_size, 1)
                    _add(result.total, None, disk, info.st_size, 1)
                    files_seen += 1
                    bytes_seen += disk
                else:
                    sums = here.get(uid)
                    if sums is None:
                        sums = here[uid] = [0, 0, 0]
                    sums[0] += disk
                    sums[1] += info.st_size
                    sums[2] += 1
                if disk > heap_floor:
                    item = (disk, f"{base}{entry.name}", uid, top or entry.name, vc)
                    if len(heap) < largest:
                        heapq.heappush(heap, item)
                    else:
                        heapq.heappushpop(heap, item)
                    if len(heap) >= largest:
                        heap_floor = heap[0][0]
        if relative:
            result.directories += 1
        for uid, (disk, size, files) in here.items():
            _add(result.by_uid, uid, disk, size, files)
            _add(result.total, None, disk, size, files)
            _add(result.by_top, top, disk, size, files)
            if vc:
                _add(result.by_vc, vc, disk, size, files)
                _add(result.by_vc_uid, (vc, uid), disk, size, files)
            files_seen += files
            bytes_seen += disk
        if progress is not None and files_seen >= next_progress:
            next_progress = files_seen + progress_every
            progress(files_seen, bytes_seen)
    result.largest = [
        LargePath(path, size, uid, entry_top, entry_vc)
        for size, path, uid, entry_top, entry_vc in sorted(heap, reverse=True)
    ]
    result.finished = time.time()
    if progress is not None:
        progress(result.total.files, result.total.bytes)
    return result


def _vc_prefix(vc_parent: str | None) -> str | None:
    """What the path (from the root) of a directory inside a VC's directory starts with."""
    if vc_parent is None:
        return None
    normal = os.path.normpath(vc_parent.strip("/") or ".")
    return "" if normal == "." else f"{normal}/"


def _vc_of(relative: str, vc_prefix: str | None) -> str:
    """The VC whose directory ``relative`` is in (or is), "" for none."""
    if vc_prefix is None or not relative.startswith(vc_prefix):
        return ""
    return relative[len(vc_prefix) :].partition("/")[0]


def _add(table: dict[Any, Usage] | Usage, key: object, disk: int, size: int, files: int) -> None:
    usage = table if isinstance(table, Usage) else table.get(key)
    if usage is None:
        usage = table[key] = Usage()  # type: ignore[index]
    usage.add(disk, size, files)
