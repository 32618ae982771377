"""The portal's own files are its own: no job, and no other account, can read them.

Every Trainyard process creates files with umask 077 (the SQLite database and its journal,
the embedded Redis's socket and data, Celery beat's schedule, the secret key: 0600, and
their directories 0700). ``var/`` itself is 0711 where the portal is root, so that jobs,
running as their owners, can pass through it to their own directories under
``var/local-backend/`` and ``var/logs/`` without being able to list it or open anything
else in it; 0700 otherwise. Files made by an earlier version with looser modes are
tightened at start.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PORTAL_UMASK = 0o077
# Files of the portal's that may already exist under var/ (the SQLite database with its
# journal, the embedded Redis's data, beat's schedule, the memory backend's table).
PRIVATE_FILES = (
    "secret_key", "trainyard.sqlite3", "trainyard.sqlite3-wal", "trainyard.sqlite3-shm",
    "test.sqlite3", "test.sqlite3-wal", "test.sqlite3-shm", "redis.db", "redis.sock",
    "celerybeat-schedule", "memory-backend.json",
)  # fmt: skip
PRIVATE_DIRS = ("run",)


def make_portal_files_private(var_dir: Path) -> None:
    """Set this process's umask and tighten what already lies in ``var_dir``."""
    os.umask(PORTAL_UMASK)
    if var_dir.stat().st_uid != os.geteuid():
        return  # someone else's directory (a shared mount): leave its modes to its owner
    var_dir.chmod(0o711 if os.geteuid() == 0 else 0o700)
    for name in PRIVATE_FILES:
        path = var_dir / name
        with contextlib.suppress(FileNotFoundError):
            if not path.is_symlink():
                path.chmod(0o600)
    for name in PRIVATE_DIRS:
        path = var_dir / name
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o700)
