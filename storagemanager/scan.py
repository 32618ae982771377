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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from storagemanager.paths import check_root

PROGRESS_EVERY_FILES = 50_000
# A directory is opened without following a symlink put in its place since it was listed.
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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

    Everything in one directory shares its top-level directory and VC, so the loop over
    a directory's entries only adds up per uid; the sums go to the totals once per
    directory (this keeps the walk within 2x of ``du``: docs/benchmarks.md)."""
    root_dev = check_root(root).st_dev
    root = os.path.normpath(root)
    result = ScanResult(root=root, started=time.time())
    seen_links: set[tuple[int, int]] = set()
    heap: list[tuple[int, str, int, str, str]] = []  # the `largest` biggest files so far
    heap_floor = -1 if largest else 1 << 62  # a file must be bigger than this to enter
    vc_parent_path = (
        os.path.normpath(os.path.join(root, vc_parent)) if vc_parent is not None else None
    )
    prefix = len(root) + 1
    next_progress = progress_every
    files_seen = bytes_seen = 0
    is_dir = stat.S_ISDIR
    # (directory, its top-level directory, its VC, and its own uid, blocks and size)
    stack: list[tuple[str, str, str, int, int, int]] = [(root, "", "", -1, 0, 0)]
    while stack:
        directory, top, vc, dir_uid, dir_disk, dir_size = stack.pop()
        # Per uid: [bytes on disk, apparent bytes, files]; the directory's own blocks
        # count for its owner, as du counts them.
        here: dict[int, list[int]] = {dir_uid: [dir_disk, dir_size, 0]} if dir_uid >= 0 else {}
        in_vc_parent = directory == vc_parent_path
        try:
            # Listing through a descriptor makes each entry's stat an fstatat relative to
            # it (as du does), not a lookup of the whole path again.
            fd = os.open(directory, _DIRECTORY_FLAGS)
        except OSError as error:
            result.errors.append(f"{directory}: {error.strerror}")
            fd = -1
        if fd >= 0:
            with os.scandir(fd) as entries, _closing(fd):
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError as error:
                        result.errors.append(f"{directory}/{entry.name}: {error.strerror}")
                        continue
                    if is_dir(info.st_mode):
                        name = entry.name
                        if info.st_dev != root_dev:
                            result.skipped_mounts.append(f"{directory}/{name}")
                            continue
                        child_vc = vc or (name if in_vc_parent else "")
                        stack.append((
                            f"{directory}/{name}", top or name, child_vc,
                            info.st_uid, info.st_blocks * 512, info.st_size,
                        ))  # fmt: skip
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
                        item = (disk, f"{directory}/{entry.name}", uid, top or entry.name, vc)
                        if len(heap) < largest:
                            heapq.heappush(heap, item)
                        else:
                            heapq.heappushpop(heap, item)
                        if len(heap) >= largest:
                            heap_floor = heap[0][0]
        if directory != root:
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
        LargePath(path[prefix:], size, uid, entry_top, entry_vc)
        for size, path, uid, entry_top, entry_vc in sorted(heap, reverse=True)
    ]
    result.finished = time.time()
    if progress is not None:
        progress(result.total.files, result.total.bytes)
    return result


@contextmanager
def _closing(fd: int) -> Iterator[None]:
    try:
        yield
    finally:
        os.close(fd)


def _add(table: dict[Any, Usage] | Usage, key: object, disk: int, size: int, files: int) -> None:
    usage = table if isinstance(table, Usage) else table.get(key)
    if usage is None:
        usage = table[key] = Usage()  # type: ignore[index]
    usage.add(disk, size, files)
