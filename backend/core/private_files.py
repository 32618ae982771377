"""The portal's own files are its own: no job, and no other account, can read them.

The portal's servers (``make run``, gunicorn, the Celery worker and beat) create files
with umask 077: the SQLite database and its journal, the embedded Redis's socket and
data, beat's schedule are 0600, their directories 0700; the secret key is made 0600
whoever makes it. ``var/`` itself is 0711 where the portal is root, so that jobs, running
as their owners, can pass through it to their own directories under
``var/local-backend/`` and ``var/logs/`` without being able to list it or open anything
else in it; 0700 otherwise. Files made with looser modes (by an earlier version, or a
``manage.py migrate`` run by hand) are tightened whenever Trainyard starts. Management
commands keep the caller's umask: what ``makemigrations`` writes is source code.
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


def use_private_umask() -> None:
    """What this process creates from now on is its account's alone."""
    os.umask(PORTAL_UMASK)


def make_portal_files_private(var_dir: Path) -> None:
    """Tighten what already lies in ``var_dir`` (``var_dir`` itself, the portal's files)."""
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
