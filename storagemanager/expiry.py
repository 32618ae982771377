"""Expiry: find files nobody has used for the policy's days, and delete them gently.

A file's age is that of the newest of its atime, mtime and ctime: a file someone read,
wrote, renamed or chmod-ed recently is in use. Deletion goes file by file at a set rate
(so that a huge tree does not hold the file server's metadata locks), re-checking each
file just before it goes, then removes the directories it emptied. Nothing outside the
root is touched (see :mod:`storagemanager.paths`).
"""

from __future__ import annotations

import fnmatch
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from storagemanager.paths import UnsafePath, check_inside, check_root


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
    root_dev = check_root(root).st_dev
    root = os.path.normpath(root)
    protection = Protection(never_expire)
    threshold = max(expire_before, warn_before or expire_before)
    prefix = len(root) + 1
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)  # read the whole directory before anything goes
        except OSError:
            continue
        for entry in entries:
            relative = entry.path[prefix:]
            if protection.patterns and protection.covers(relative):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_dev == root_dev:
                    stack.append(entry.path)
                continue
            used = last_used(info)
            if used < threshold:
                yield Candidate(
                    entry.path, info.st_uid, info.st_blocks * 512, used, used < expire_before
                )


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
    """Delete the expired candidates one at a time, each re-checked (still under the root,
    not reached through a symlink or a mount point, still unused), then remove the
    directories that this left empty, deepest first. Returns what went and what did not."""
    root_dev = check_root(root).st_dev
    root = os.path.normpath(root)
    rate = rate or RateLimit(0)
    done = Deletion()
    emptied: set[str] = set()
    for candidate in candidates:
        if not candidate.expired:
            continue
        try:
            info = check_inside(root, candidate.path, root_dev)
        except (UnsafePath, OSError) as error:
            done.skipped.append((candidate.path, str(error)))
            continue
        if stat.S_ISDIR(info.st_mode):
            done.skipped.append((candidate.path, "is a directory"))
            continue
        if last_used(info) >= expire_before:
            done.skipped.append((candidate.path, "used since the scan"))
            continue
        rate.wait()
        try:
            os.unlink(candidate.path)
        except OSError as error:
            done.skipped.append((candidate.path, error.strerror or str(error)))
            continue
        done.files += 1
        done.bytes += info.st_blocks * 512
        emptied.add(os.path.dirname(candidate.path))
        if progress is not None and done.files % progress_every == 0:
            progress(done)
    done.directories = _remove_emptied(root, root_dev, emptied, rate)
    if progress is not None:
        progress(done)
    return done


def _remove_emptied(root: str, root_dev: int, directories: set[str], rate: RateLimit) -> int:
    """Remove each directory (and then its parents, up to the root) that is now empty."""
    removed = 0
    pending = set(directories)
    while pending:
        # Deepest first, so that a parent is tried once its children are gone.
        directory = max(pending, key=lambda path: path.count("/"))
        pending.discard(directory)
        if directory == root:
            continue
        try:
            info = check_inside(root, directory, root_dev)
            if not stat.S_ISDIR(info.st_mode):
                continue
            rate.wait()
            os.rmdir(directory)
        except (UnsafePath, OSError):
            continue  # not empty, or not ours to remove
        removed += 1
        pending.add(os.path.dirname(directory))
    return removed
