"""Unix accounts on this host: who a name is, and accounts created for Trainyard's users.

Jobs run as their owners' accounts, which either exist already (a site with LDAP or SSSD
has one per person) or are created here with ``groupadd`` and ``useradd``: a system
account with a group of the same name and number, a home directory of mode 0700, a
locked password, and a uid from a range of Trainyard's own. Creating is idempotent: an
account of that name already there is taken as it is.

Switching users needs root; a process that is not root runs every job as itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from jobmanager.backends.base import RunAs

# What useradd accepts on every distribution (Debian's NAME_REGEX), in at most 32 bytes.
NAME_PATTERN = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
LOCK_FILE = Path("/run/trainyard-accounts.lock")
ACCOUNT_TOOL_TIMEOUT_SECONDS = 60


class AccountError(RuntimeError):
    """An account could not be found or created; the message says why."""


def can_switch_users() -> bool:
    """Whether this process may run processes as other accounts (it is root)."""
    return os.geteuid() == 0


def own_run_as() -> RunAs:
    """This process's own account: what every job runs as in single-user mode."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        entry = pwd.getpwuid(uid)
        name, home = entry.pw_name, entry.pw_dir
    except KeyError:
        name, home = str(uid), os.environ.get("HOME", "")
    return RunAs(uid, gid, tuple(sorted(set(os.getgroups()) | {gid})), name, home)


def lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def run_as(uid: int, gid: int, name: str) -> RunAs:
    """The identity of an account: its supplementary groups from this host's group
    database when the account exists here under that uid (else just its primary group),
    and its home directory."""
    entry = lookup(name)
    if entry is None or entry.pw_uid != uid:
        return RunAs(uid, gid, (gid,), name, "")
    return RunAs(uid, gid, tuple(sorted(set(os.getgrouplist(name, gid)))), name, entry.pw_dir)


def ensure_account(name: str, uids: range, home_base: str, comment: str = "") -> pwd.struct_passwd:
    """The account ``name``, created with the lowest free uid of ``uids`` (and a group of
    the same name and number) unless it exists. Raises AccountError."""
    if not NAME_PATTERN.fullmatch(name):
        raise AccountError(f"{name!r} is not a valid Unix account name.")
    existing = lookup(name)
    if existing is not None:
        return existing
    if not can_switch_users():
        raise AccountError("Only root can create Unix accounts.")
    with _host_lock():
        existing = lookup(name)  # another process may have made it while this one waited
        if existing is not None:
            return existing
        uid = _free_id(uids)
        home = str(Path(home_base) / name)
        group = _group_of(name)
        if group is None:
            _run(["groupadd", "--system", "--gid", str(uid), name])
            gid = uid
        else:
            gid = group.gr_gid
        _run(
            ["useradd", "--system", "--uid", str(uid), "--gid", str(gid), "--no-log-init",
             "--create-home", "--home-dir", home, "--shell", "/bin/bash",
             "--comment", comment or f"Trainyard user {name}", name]
        )  # fmt: skip
        entry = pwd.getpwnam(name)
        with contextlib.suppress(OSError):
            os.chmod(entry.pw_dir, 0o700)  # a home is its owner's alone
        return entry


def _group_of(name: str) -> grp.struct_group | None:
    try:
        return grp.getgrnam(name)
    except KeyError:
        return None


def _free_id(uids: range) -> int:
    """The lowest number of the range that is neither a uid nor a gid on this host."""
    used_uids = {entry.pw_uid for entry in pwd.getpwall()}
    used_gids = {entry.gr_gid for entry in grp.getgrall()}
    for candidate in uids:
        if candidate not in used_uids and candidate not in used_gids:
            return candidate
    raise AccountError(
        f"No free uid left in Trainyard's range {uids.start}-{uids.stop - 1}; widen "
        "TRAINYARD_UNIX_UID_RANGE."
    )


def _run(command: list[str]) -> None:
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=ACCOUNT_TOOL_TIMEOUT_SECONDS
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise AccountError(f"{command[0]} failed: {error}") from error
    if result.returncode != 0:
        raise AccountError(f"{command[0]} failed: {result.stderr.strip() or result.returncode}")


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    """One account creation at a time on this host, whichever process asks: a free uid
    is chosen and taken under the lock."""
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def parse_uid_range(text: str) -> range:
    """``30000-39999`` as a range; raises ValueError."""
    low, sep, high = text.partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(f"write the uid range as LOW-HIGH, e.g. 30000-39999, not {text!r}")
    start, end = int(low), int(high)
    if not 0 < start <= end:
        raise ValueError(f"{text!r}: the range must be low-high, above 0")
    return range(start, end + 1)
