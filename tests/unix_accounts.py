"""Real Unix accounts for tests that run jobs as their owners (the suite runs as root, as
CI does), and directories those accounts can reach.

Test accounts are named ``ty-test-<name>`` and take uids from 61000-61999, above the
range Debian gives people (1000-60000) and below nobody's; they are created once per
machine and reused, since creating an account is idempotent. The processes of a parallel
run (pytest-xdist) share them: creation is one at a time on the host (host_accounts' lock
file), and what looks for a job's processes goes by its job id, random in every worker.
"""

from __future__ import annotations

import functools
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from jobmanager.backends import RunAs
from jobmanager.backends.host_accounts import can_switch_users, ensure_account, run_as

TEST_UID_RANGE = "61000-61999"
TEST_UIDS = range(61000, 62000)
TEST_NAME_PREFIX = "ty-test-"
# What every server a test starts is given, so that the accounts it provisions are these.
TEST_ACCOUNT_ENV = {
    "TRAINYARD_UNIX_NAME_PREFIX": TEST_NAME_PREFIX,
    "TRAINYARD_UNIX_UID_RANGE": TEST_UID_RANGE,
}
REPOSITORY = Path(__file__).resolve().parent.parent
# The suite's own Python may sit where only root may go (under /root, as on CI): a job, run
# as its owner, runs the system's Python of the same version, which finds the suite's
# packages (torch, Django) through PYTHONPATH as a user's job would find its own.
_SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
JOB_PYTHON = str(_SYSTEM_PYTHON) if _SYSTEM_PYTHON.exists() else sys.executable
JOB_PYTHONPATH = f"{sysconfig.get_paths()['purelib']}:{REPOSITORY}"


def require_root() -> None:
    if not can_switch_users():
        pytest.skip("running jobs as other accounts needs root")


@functools.cache
def job_account(name: str) -> RunAs:
    """The account ``ty-test-<name>``, created if this machine has none yet."""
    require_root()
    entry = ensure_account(TEST_NAME_PREFIX + name, TEST_UIDS, "/home")
    return run_as(entry.pw_uid, entry.pw_gid, entry.pw_name)


@contextmanager
def reachable_directory() -> Iterator[Path]:
    """A fresh directory under /tmp that every account may pass through (mode 0711), as a
    host's job directories must be; pytest's own tmp_path is root's alone (0700)."""
    directory = Path(tempfile.mkdtemp(prefix="trainyard-test-"))
    directory.chmod(0o711)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def readable_script(directory: Path, name: str, text: str) -> Path:
    """A file every account may read, in a directory every account may pass through."""
    path = directory / name
    path.write_text(text)
    path.chmod(0o644)
    return path


def owned_directory(path: Path, account: RunAs, mode: int = 0o700) -> Path:
    """``path`` made and given to ``account``, with ``mode``."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.chown(path, account.uid, account.gid)
    path.chmod(mode)
    return path
