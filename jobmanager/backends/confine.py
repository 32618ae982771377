"""The one way a process enters a job's confinement on its host, and what it consists of.

A :class:`Confinement` is everything a process of a job runs under: the owner's Unix
account (uid, primary gid and supplementary groups, as ``initgroups`` sets them), the
working directory, the environment, and the limits (a cgroup v2 to join, else rlimits).
:func:`enter` moves the calling process into it, for good: it joins the cgroup and sets
the rlimits while it still may, drops every privilege (groups, then gid, then uid, real,
effective and saved), sets ``no_new_privs`` so that no setuid program or file capability
can give any back, checks that all of that holds, and only then enters the working
directory, as the owner, so that the kernel decides whether the owner may.

The local backend's init calls it in the child it then execs the command in; a session
into a running job (SSH) does the same with the confinement the backend recorded for the
job's worker, so that it runs as the same account, in the same directory, with the same
environment and limits.

It also opens, for root, files that lie in a job's own directories (its logs): a job may
have put a symlink, a hard link or a FIFO in their place to make root write or read
something else, so they are opened without following links and refused unless they are
plain files with one name.

Only the standard library is imported: the init loads this file by path while it runs
isolated (``python -I -S``) from whatever the job's environment holds.
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import os
import resource
import signal
import stat
from typing import Any

PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
JOB_UMASK = 0o077  # what a job creates is its owner's alone unless it says otherwise
# Signals Python ignores for itself that a command must get with their default action.
RESET_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)
)
CAPABILITY_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapAmb")


class ConfinementError(RuntimeError):
    """The process could not be confined as asked; it must not run the job's command."""


CONFINEMENT_FIELDS = (
    "uid", "gid", "groups", "user", "working_dir", "env", "cgroup", "rlimits", "switch_user",
    "sandbox",
)  # fmt: skip


class Confinement:
    """What one worker's processes run under (and what a session into it must join).

    Immutable, compared by value. A plain class rather than a dataclass: every worker's
    init loads this module, and ``dataclasses`` (with ``inspect``) would be a third of its
    start-up."""

    __slots__ = CONFINEMENT_FIELDS
    uid: int
    gid: int
    groups: tuple[int, ...]
    user: str
    working_dir: str
    env: dict[str, str]
    cgroup: str | None  # a cgroup v2 directory to join
    rlimits: dict[str, int]  # e.g. {"RLIMIT_DATA": bytes}
    switch_user: bool  # False in single-user mode: the account is the caller's own
    # The worker's runc container, where it runs in one: {"root", "container", "bundle",
    # "cgroup"} (runc's state directory, the container's id, its bundle, its cgroup path).
    sandbox: dict[str, str] | None

    def __init__(
        self,
        uid: int,
        gid: int,
        groups: tuple[int, ...],
        user: str,
        working_dir: str,
        env: dict[str, str] | None = None,
        cgroup: str | None = None,
        rlimits: dict[str, int] | None = None,
        switch_user: bool = True,
        sandbox: dict[str, str] | None = None,
    ) -> None:
        values = (uid, gid, groups, user, working_dir, dict(env or {}), cgroup,
                  dict(rlimits or {}), switch_user, sandbox)  # fmt: skip
        for name, value in zip(CONFINEMENT_FIELDS, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Confinement is immutable: cannot set {name}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in CONFINEMENT_FIELDS)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # holds dicts, as the dataclass did

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in CONFINEMENT_FIELDS)
        return f"Confinement({fields})"

    def replace(self, **changes: object) -> Confinement:
        """A copy with ``changes`` (as ``dataclasses.replace`` makes one)."""
        return type(self)(**({name: getattr(self, name) for name in CONFINEMENT_FIELDS} | changes))

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in CONFINEMENT_FIELDS}
        return data | {"groups": list(self.groups), "env": dict(self.env),
                       "rlimits": dict(self.rlimits)}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Confinement:
        return cls(**(data | {"groups": tuple(data["groups"])}))


def enter(confinement: Confinement) -> None:
    """Confine the calling process as ``confinement`` says, irreversibly; raise
    ConfinementError (the caller must then exit, not exec) when any step fails."""
    if confinement.cgroup:
        join_cgroup(confinement.cgroup)  # cgroup.procs is root's: before the drop
    set_rlimits(confinement.rlimits)
    if confinement.switch_user:
        drop_privileges(confinement.uid, confinement.gid, confinement.groups)
    set_no_new_privs()
    verify(confinement)
    os.umask(JOB_UMASK)
    for signum in RESET_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.chdir(confinement.working_dir)
    except OSError as error:
        raise ConfinementError(
            f"{confinement.user} cannot enter the working directory "
            f"{confinement.working_dir}: {error.strerror}"
        ) from error


def join_cgroup(directory: str) -> None:
    try:
        with open(os.path.join(directory, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    except OSError as error:
        raise ConfinementError(f"cannot join the cgroup {directory}: {error}") from error


def set_rlimits(rlimits: dict[str, int]) -> None:
    for name, value in rlimits.items():
        if not name.startswith("RLIMIT_") or not hasattr(resource, name):
            raise ConfinementError(f"unknown resource limit {name}")
        which = getattr(resource, name)
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)  # a limit can be lowered, never raised past the hard one
        try:
            resource.setrlimit(which, (value, value))
        except (OSError, ValueError) as error:
            raise ConfinementError(f"cannot set {name} to {value}: {error}") from error


def drop_privileges(uid: int, gid: int, groups: tuple[int, ...]) -> None:
    """Become ``uid``/``gid`` with exactly ``groups``: supplementary groups first (only
    root may set them), then the gid, then the uid, each real, effective and saved."""
    try:
        os.setgroups(list(groups))
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as error:
        raise ConfinementError(f"cannot become uid {uid} gid {gid}: {error}") from error


def set_no_new_privs() -> None:
    """No exec from here on can gain privileges (setuid bits and file capabilities are
    ignored); inherited by every child and never cleared."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfinementError(f"cannot set no_new_privs: {os.strerror(ctypes.get_errno())}")


def verify(confinement: Confinement) -> None:
    """Check the drop from the kernel's side: the ids, the groups, no capabilities left,
    no_new_privs set, and no way back to root."""
    if confinement.switch_user:
        uid, gid = confinement.uid, confinement.gid
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
            raise ConfinementError(
                f"still uids {os.getresuid()} gids {os.getresgid()} after the drop"
            )
        if set(os.getgroups()) != set(confinement.groups):
            raise ConfinementError(f"still groups {sorted(os.getgroups())} after the drop")
    if os.geteuid() != 0:
        left = capabilities()
        if any(left.values()):
            raise ConfinementError(f"capabilities left after the drop: {left}")
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise ConfinementError("could become root again after the drop")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        raise ConfinementError("no_new_privs is not set")


def capabilities() -> dict[str, int]:
    """This process's capability sets, from /proc (empty where there is none)."""
    found = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in CAPABILITY_FIELDS:
                    found[name] = int(value.strip(), 16)
    except OSError:
        pass
    return found


def load(path: str) -> Confinement:
    with open(path) as file:
        return Confinement.from_json(json.load(file))


# --- files in a job's directories, opened by root --------------------------------------


def open_log(path: str, uid: int, gid: int) -> int:
    """A descriptor appending to a job's log at ``path`` (created, mode 0600, if missing),
    owned by ``uid``/``gid``. Raises OSError when ``path`` is a symlink, not a plain file,
    has another name, or belongs to someone else."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    descriptor = os.open(path, flags, 0o600)
    try:
        info = _checked(path, descriptor)
        if info.st_uid not in (uid, os.geteuid()):
            raise OSError(errno.EPERM, f"{path} belongs to uid {info.st_uid}")
        if os.geteuid() == 0 and (info.st_uid, info.st_gid) != (uid, gid):
            os.fchown(descriptor, uid, gid)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def open_job_file(path: str) -> io.BufferedReader:
    """``path`` opened for reading, refused (OSError) unless it is a plain file with one
    name, reached without following a link at its end."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _checked(path, descriptor)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "rb")


def _checked(path: str, descriptor: int) -> os.stat_result:
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, f"{path} is not a plain file")
    if info.st_nlink != 1:
        raise OSError(errno.EMLINK, f"{path} has {info.st_nlink} names")
    return info
