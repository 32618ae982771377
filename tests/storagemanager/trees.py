"""Real directory trees with crafted timestamps, for the scan and expiry tests.

ctime cannot be set: it is "now" whenever a file's inode changes (utime included). So a
tree is built in two phases around a cut-off T: files made before T (their atime/mtime
then set far in the past) have every time before T and expire with ``expire_before=T``;
files made or changed after T do not.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

OLD = time.time() - 400 * 86400


def make_files(
    directory: Path, count: int, size: int = 0, old: bool = False, stem: str = "f"
) -> list[str]:
    """``count`` files of ``size`` bytes in ``directory``; with ``old``, atime and mtime
    400 days ago."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = b"x" * size
    paths = []
    for index in range(count):
        path = f"{directory}/{stem}{index:06d}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if payload:
            os.write(fd, payload)
        if old:
            os.utime(fd, (OLD, OLD))
        os.close(fd)
        paths.append(path)
    return paths


def cut_off(probe_dir: Path) -> float:
    """A time T after everything made so far and before anything made from now on:
    T is now, and this returns once a freshly changed inode shows a ctime past T (the
    kernel's file clock ticks coarser than time.time())."""
    cut = time.time()
    probe = probe_dir / ".probe"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        probe.touch()
        probe.chmod(0o600 if probe.stat().st_mode & 0o77 else 0o644)
        if probe.stat().st_ctime > cut:
            probe.unlink()
            return cut
    raise AssertionError("the file clock did not pass the cut-off in 5 s")
