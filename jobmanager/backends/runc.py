"""The OCI runtime (``runc``) as the local backend's init and sessions drive it.

A job's worker is one runc container, made from a bundle ``sandbox.py`` writes: the init
starts it detached (``runc run --detach``), so that its first process, whose parent runc
was, is reparented to the init (a child subreaper) and waited for as any child; forwards
stops to it; and once it has ended (the kernel kills every other process of its pid
namespace then), reads from its memory cgroup whether the kernel killed a process for
memory, removes its cgroups and runc's record of it (``forget_stopped``: what ``runc
delete`` does for a stopped container, without a runc process). The backend's removal
deletes a container that did not end so (``runc delete --force``: whatever is left of one
not stopped is SIGKILLed with its cgroup). A session into the worker is ``runc exec`` into
the same container: its namespaces and cgroups.

Only the standard library is imported: the init and ``session_enter`` load this file by
path while they run isolated (``python -I -S``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

RUNC = "runc"
JOB_UMASK = 0o077  # as confine.JOB_UMASK (this file imports nothing of the package)
CGROUPS = "/sys/fs/cgroup"
MEMORY_CGROUPS = "/sys/fs/cgroup/memory"
CGROUP_REMOVAL_TRIES = 10
RUNTIME_TIMEOUT_SECONDS = 30.0
# In a worker's bundle: the container's pid, which runc writes once the container runs.
CONTAINER_PID_FILE = "container.pid"


def runc_argv(root: str, *arguments: str) -> list[str]:
    """A runc command line using the state directory ``root`` (one per backend)."""
    return [RUNC, "--root", root, *arguments]


def run_detached_argv(root: str, bundle: str, container: str, pid_file: str) -> list[str]:
    """The command that creates and starts ``container`` from ``bundle`` and exits, its
    first process's pid written to ``pid_file``."""
    return runc_argv(root, "run", "--detach", "--bundle", bundle, "--pid-file", pid_file, container)


def exec_argv(root: str, container: str, process_file: str) -> list[str]:
    """The command that runs a process (an OCI ``process`` object in ``process_file``) in
    ``container``, in the foreground, and exits with its status."""
    return runc_argv(root, "exec", "--process", process_file, container)


def kill(root: str, container: str, signal_name: str = "KILL") -> None:
    """Send the signal to every process of the container (nothing when it is gone)."""
    _quiet(runc_argv(root, "kill", "--all", container, signal_name))


def delete(root: str, container: str) -> None:
    """Kill whatever is left of the container and remove it, its cgroups with it."""
    _quiet(runc_argv(root, "delete", "--force", container))


def remove_cgroups(cgroup_path: str) -> None:
    """The container's cgroup in every hierarchy, where ``runc delete`` left it (v1: it
    does when the last of its processes is still exiting, the directory busy): empty by
    then, removed with a few tries."""
    relative = cgroup_path.lstrip("/")
    try:
        hierarchies = [entry.path for entry in os.scandir(CGROUPS) if entry.is_dir()]
    except OSError:
        return
    for hierarchy in hierarchies:
        path = os.path.join(hierarchy, relative)
        for _ in range(CGROUP_REMOVAL_TRIES):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
                continue
            break


def forget_unmade(root: str, container: str) -> None:
    """Remove the state directory of a container that runc was killed while making (no
    ``state.json`` in it yet): runc refuses a new container of that id while it is there.
    ``root`` is the portal's own runtime directory; nothing in it is a tenant's."""
    directory = os.path.join(root, container)
    if os.path.exists(os.path.join(directory, "state.json")):
        return
    _remove_state_directory(directory)


def forget_stopped(root: str, container: str) -> None:
    """Remove runc's record of a container that has stopped (its first process reaped, so
    every process of its pid namespace gone) and whose cgroups are removed: all that
    ``runc delete`` does then (no hooks here) is remove its state directory, and this does
    it without starting runc, a Go process of some ms of CPU for every job."""
    _remove_state_directory(os.path.join(root, container))


def _remove_state_directory(directory: str) -> None:
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:  # runc's own files (exec.fifo), none a directory
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def exists(root: str, container: str) -> bool:
    """Whether runc still knows the container (created, running or stopped)."""
    return os.path.exists(os.path.join(root, container, "state.json"))


def oom_kills(cgroup_path: str) -> int:
    """How many processes the kernel killed for memory in the container's memory cgroup
    (v1 ``memory.oom_control``); 0 when it cannot tell."""
    path = os.path.join(MEMORY_CGROUPS, cgroup_path.lstrip("/"), "memory.oom_control")
    try:
        with open(path) as control:
            for line in control:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def process(
    args: list[str],
    env: dict[str, str],
    cwd: str,
    uid: int,
    gid: int,
    groups: list[int],
    terminal: bool = False,
) -> dict[str, object]:
    """An OCI ``process`` object: ``args`` as ``uid``/``gid`` with ``groups``, in ``cwd``,
    with ``env``, no new privileges and no capabilities (on a terminal of its own when
    ``terminal``)."""
    return {
        "terminal": terminal,
        "user": {"uid": uid, "gid": gid, "additionalGids": groups, "umask": JOB_UMASK},
        "args": args,
        "env": [f"{name}={value}" for name, value in env.items()],
        "cwd": cwd,
        "noNewPrivileges": True,
        "capabilities": {name: [] for name in CAPABILITY_SETS},
    }


CAPABILITY_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def _quiet(argv: list[str]) -> None:
    subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=RUNTIME_TIMEOUT_SECONDS,
        check=False,
    )
