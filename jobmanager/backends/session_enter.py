"""Start one process of a session into a running job, confined as the job's worker is.

    python -I -S session_enter.py --fd N [--tty] -- <argv>

The confinement (``confine.Confinement`` as JSON, with the session's environment) is read
from file descriptor N, which the caller (the SSH gateway, root) passes and this closes:
it holds the job's environment, which must not show in the process list. The process then
enters the confinement as the worker's init does (cgroup or rlimits, the owner's uid, gid
and groups, ``no_new_privs``, the working directory entered as the owner) and execs
``argv``. With ``--tty`` its standard input is a terminal's slave side, which it makes
its controlling terminal in a session of its own, as a login would.

A worker that runs in a runc container (the confinement names its ``sandbox``) is
entered through the runtime instead: ``runc exec`` runs ``argv`` in the container, as the
owner, with no capabilities and ``no_new_privs``, in its working directory, its
namespaces and its cgroups (its memory, CPU and process limits count the session too), on
a terminal of runc's own when ``--tty`` (runc relays it to ours, resizes included). Such a
process dies with the container, whatever it forked.

A process that cannot be confined prints why and exits 127: nothing runs unconfined.
Only the standard library is imported (and ``confine.py``, loaded by path), so that it
runs isolated (``python -I -S``) from whatever the job's environment holds.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import sys
import termios
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobmanager.backends import confine as confine_module

CANNOT_RUN = 127


def _load(name: str) -> ModuleType:
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"trainyard_{name}", path)
    assert spec is not None and spec.loader is not None  # a file path always has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    descriptor = int(argv[1]) if argv[:1] == ["--fd"] and len(argv) > 1 else None
    argv = argv[2:] if descriptor is not None else argv
    tty = argv[:1] == ["--tty"]
    argv = argv[1:] if tty else argv
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if descriptor is None or not argv:
        print("session_enter: --fd N [--tty] -- <command>", file=sys.stderr)
        return CANNOT_RUN
    confine = _load("confine")
    try:
        with os.fdopen(descriptor, "rb") as source:
            confinement = confine.Confinement.from_json(json.loads(source.read()))
        if tty:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        if confinement.sandbox is not None:
            return enter_container(confinement, argv, tty)
        confine.enter(confinement)
        os.execvpe(argv[0], argv, confinement.env)
    except confine.ConfinementError as error:
        print(f"trainyard: {error}", file=sys.stderr)
    except (OSError, ValueError, TypeError, KeyError) as error:
        print(f"trainyard: cannot run {argv[0]!r}: {error}", file=sys.stderr)
    return CANNOT_RUN


def enter_container(confinement: confine_module.Confinement, argv: list[str], tty: bool) -> int:
    """Exec ``runc exec`` of ``argv`` in the worker's container (the process described on
    a pipe, so that the job's environment never shows in the process list)."""
    runc = _load("runc")
    sandbox = confinement.sandbox
    assert sandbox is not None  # only called for a worker in a container
    process = json.dumps(runc.process(
        argv, confinement.env, confinement.working_dir, confinement.uid, confinement.gid,
        list(confinement.groups), terminal=tty,
    ))  # fmt: skip
    reader, writer = os.pipe()
    os.write(writer, process.encode())  # far below a pipe's capacity
    os.close(writer)
    os.set_inheritable(reader, True)
    command = runc.exec_argv(sandbox["root"], sandbox["container"], f"/dev/fd/{reader}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
