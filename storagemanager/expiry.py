"""Expiry: find files nobody has used for the policy's days, and delete them gently.

A file's age is that of the newest of its atime, mtime and ctime: a file someone read,
wrote, renamed or chmod-ed recently is in use. Deletion goes file by file at a set rate
(so that a huge tree does not hold the file server's metadata locks), re-checking each
file just before it goes, then removes the directories it emptied. Listing and deleting
go through directory descriptors opened from the root down without following a symlink
(see :mod:`storagemanager.paths`): a tenant who swaps a directory for a symlink while a
pass runs (as root) cannot make it delete anything outside that directory.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from storagemanager.paths import HeldTree, UnsafePath, pause_point, walk


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file that has expired, or will within the warning period."""

    path: str  # absolute
    uid: int
    bytes: int
    last_used: float  # the newest of atime, mtime and ctime (epoch seconds)
    expired: bool


def last_used(info: os.stat_result) -> float:
    return max(info.st_atime, info.st_mtime, info.st_ctime)


class Protection:
    """Paths that never expire: glob patterns relative to the root ("datasets/*",
    "shared/keep"); a matching directory protects everything under it."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = [pattern.strip().strip("/") for pattern in patterns if pattern.strip()]

    def covers(self, relative: str) -> bool:
        return any(fnmatch.fnmatchcase(relative, pattern) for pattern in self.patterns)


def iter_candidates(
    root: str,
    expire_before: float,
    warn_before: float | None = None,
    never_expire: Iterable[str] = (),
) -> Iterator[Candidate]:
    """Every non-directory under ``root`` last used before ``expire_before`` (expired), or
    before ``warn_before`` (expiring soon). Symlinks are judged by the link itself and
    never followed; other filesystems mounted inside the root are skipped."""
    directories = walk(root)  # checks the root as written
    root = os.path.normpath(root)
    protection = Protection(never_expire)
    threshold = max(expire_before, warn_before or expire_before)
    root_dev = -1
    for directory in directories:
        if not directory.relative:
            root_dev = directory.stat.st_dev
        base = f"{directory.relative}/" if directory.relative else ""
        try:
            with os.scandir(directory.fd) as listing:
                entries = list(listing)  # read the whole directory before anything goes
        except OSError:
            continue
        for entry in entries:
            relative = base + entry.name
            if protection.patterns and protection.covers(relative):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_dev == root_dev:
                    directory.enter.append(entry.name)
                continue
            used = last_used(info)
            if used < threshold:
                yield Candidate(
                    f"{root}/{relative}", info.st_uid, info.st_blocks * 512, used,
                    used < expire_before,
                )  # fmt: skip


@dataclass
class Deletion:
    """What a deletion pass did."""

    files: int = 0
    bytes: int = 0
    directories: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)


class RateLimit:
    """At most ``per_second`` operations a second (0: no limit)."""

    def __init__(
        self,
        per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.interval = 1.0 / per_second if per_second > 0 else 0.0
        self.clock, self.sleep = clock, sleep
        self.next_at = clock()

    def wait(self) -> None:
        if not self.interval:
            return
        now = self.clock()
        if now < self.next_at:
            self.sleep(self.next_at - now)
            now = self.next_at
        self.next_at = max(self.next_at, now - self.interval) + self.interval


def delete_expired(
    root: str,
    candidates: Iterable[Candidate],
    expire_before: float,
    rate: RateLimit | None = None,
    progress: Callable[[Deletion], None] | None = None,
    progress_every: int = 10_000,
) -> Deletion:
    """Delete the expired candidates one at a time, each re-checked (under the root,
    reached through real directories on the root's filesystem, not a directory, still
    unused) and deleted through its directory's descriptor, then remove the directories
    that this left empty, deepest first. Returns what went and what did not."""
    rate = rate or RateLimit(0)
    done = Deletion()
    emptied: set[tuple[str, ...]] = set()
    with HeldTree(root) as tree:
        for candidate in candidates:
            if not candidate.expired:
                continue
            try:
                parts = tree.parts(candidate.path)
                directory = tree.directory(parts[:-1])
                info = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
            except (UnsafePath, OSError) as error:
                done.skipped.append((candidate.path, _reason(error)))
                continue
            if info.st_dev != tree.dev:
                done.skipped.append((candidate.path, "on another filesystem (a mount point)"))
                continue
            if stat.S_ISDIR(info.st_mode):
                done.skipped.append((candidate.path, "is a directory"))
                continue
            if last_used(info) >= expire_before:
                done.skipped.append((candidate.path, "used since the scan"))
                continue
            rate.wait()
            pause_point("expiry-unlink", candidate.path)
            try:
                os.unlink(parts[-1], dir_fd=directory)
            except OSError as error:
                done.skipped.append((candidate.path, _reason(error)))
                continue
            done.files += 1
            done.bytes += info.st_blocks * 512
            emptied.add(tuple(parts[:-1]))
            if progress is not None and done.files % progress_every == 0:
                progress(done)
        done.directories = _remove_emptied(tree, emptied, rate)
    if progress is not None:
        progress(done)
    return done


def _reason(error: Exception) -> str:
    return (error.strerror if isinstance(error, OSError) else None) or str(error)


def _remove_emptied(tree: HeldTree, directories: set[tuple[str, ...]], rate: RateLimit) -> int:
    """Remove each directory (and then its parents, up to the root) that is now empty,
    through its parent's descriptor."""
    removed = 0
    pending = set(directories)
    while pending:
        # Deepest first, so that a parent is tried once its children are gone.
        directory = max(pending, key=len)
        pending.discard(directory)
        if not directory:
            continue  # the root stays
        parts = list(directory)
        try:
            parent = tree.directory(parts[:-1])
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode) or info.st_dev != tree.dev:
                continue
            rate.wait()
            tree.forget(parts)
            os.rmdir(parts[-1], dir_fd=parent)
        except (UnsafePath, OSError):
            continue  # not empty, or not ours to remove
        removed += 1
        pending.add(directory[:-1])
    return removed
