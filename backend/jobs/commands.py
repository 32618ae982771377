"""Whether a job's owner may run the program its command names, checked at submit.

Where jobs run as their owners without an image (root on the local or Slurm backend), a
command whose program the owner cannot execute fails at once with "Permission denied":
typically the portal's own interpreter, under root's private home. The command's first
word (after ``exec``, ``env`` and ``NAME=value`` assignments) is looked at as the owner, in a
short-lived child under ``setpriv`` (backend.jobs.paths.as_account) with the job's PATH:

- an absolute path must be a file the owner may execute;
- a bare name found on the job's PATH (as the owner sees it) must be executable there; a
  name found nowhere is left to the job, as today (the working directory may hold it);
- a command too complex to tell (pipes, lists, redirections, ``$``-expansions in the
  program, a relative path, ``env`` with options, a PATH set on the line) is accepted.

The owner cannot tell a missing file from one they may not reach, so neither can the error.

A program found runnable is not looked at again for the same account, program and PATH
for ``RUNNABLE_REMEMBERED_SECONDS`` (a sweep or a burst of submissions starts one child,
not one each); a refusal is never remembered, so a fixed permission is seen at once.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
import time

from django.conf import settings

from backend.core.training_env import job_path
from backend.jobs.paths import RESOLVE_TIMEOUT_SECONDS, as_account
from jobmanager.backends import RunAs
from jobmanager.backends.host_accounts import can_switch_users
from jobmanager.backends.local import JOB_PATH

ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
OPERATOR = re.compile(r"^[();<>|&]+$")
EXPANSION = set("$`*?[{~\\")
SUGGESTION = (
    "use python (the training environment's, first on the job's PATH), /usr/bin/python3 or an image"
)
RUNNABLE_REMEMBERED_SECONDS = 60.0
RUNNABLE_REMEMBERED_MAX = 4096  # entries; all forgotten at once beyond that
# (uid, gid, groups, program, PATH) -> when the finding "runnable" expires (monotonic).
_runnable_until: dict[tuple[int, int, tuple[int, ...], str, str], float] = {}
_runnable_lock = threading.Lock()
# $1 is the program. Prints what the owner may not run and exits 1, or exits 0.
LOOKUP = r"""
set -f
case $1 in
    /*) [ -f "$1" ] && [ -x "$1" ] && exit 0; printf '%s' "$1"; exit 1;;
esac
IFS=:
for dir in $PATH; do
    [ -n "$dir" ] && [ -f "$dir/$1" ] || continue
    [ -x "$dir/$1" ] && exit 0
    [ -n "$first" ] || first="$dir/$1"
done
[ -z "$first" ] && exit 0
printf '%s' "$first"; exit 1
"""


def runs_on_host(image: str) -> bool:
    """Whether a job with ``image`` runs its command on this host's files as its owner:
    no image, on the local or Slurm backend, with a portal that may switch accounts."""
    backend = settings.TRAINYARD_BACKEND
    return not image.strip() and backend in ("local", "slurm") and can_switch_users()


def program_of(command: str) -> str | None:
    """The program a simple command runs (its first word after ``exec``, ``env`` and
    assignments), or None when the command is too complex to tell."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None
    if not words or any(OPERATOR.match(word) for word in words):
        return None
    index = 1 if words[0] == "exec" else 0
    if index < len(words) and words[index] == "env":
        index += 1
    while index < len(words) and ASSIGNMENT.match(words[index]):
        if words[index].startswith("PATH="):
            return None
        index += 1
    if index >= len(words):
        return None
    program = words[index]
    if program.startswith("-") or EXPANSION & set(program):
        return None
    if "/" in program and not program.startswith("/"):
        return None  # relative to the working directory, which the job may still make
    return program


def forget_runnable_programs() -> None:
    """Forget every program remembered as runnable: the next submission checks again."""
    with _runnable_lock:
        _runnable_until.clear()


def not_runnable(run_as: RunAs, program: str, path: str) -> str | None:
    """The file ``program`` names that ``run_as`` may not execute, or None when they may
    (or when it is not on ``path`` at all, or the check itself failed: the job will say)."""
    key = (run_as.uid, run_as.gid, tuple(run_as.groups), program, path)
    now = time.monotonic()
    with _runnable_lock:
        if _runnable_until.get(key, 0.0) > now:
            return None
    try:
        done = subprocess.run(
            [*as_account(run_as), "/bin/sh", "-c", LOOKUP, "sh", program],
            capture_output=True,
            cwd="/",
            env={"PATH": path, "LC_ALL": "C"},
            timeout=RESOLVE_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode == 0:
        with _runnable_lock:
            if len(_runnable_until) >= RUNNABLE_REMEMBERED_MAX:
                _runnable_until.clear()
            _runnable_until[key] = now + RUNNABLE_REMEMBERED_SECONDS
    if done.returncode != 1 or not done.stdout:
        return None
    return done.stdout.decode(errors="replace")


def command_errors(command: str, env: dict[str, str], run_as: RunAs | None) -> list[str]:
    """Why the job's owner cannot run ``command``'s program ([] when they can, or when
    that cannot be told); ``run_as`` None means jobs do not run as their owners here."""
    if run_as is None:
        return []
    program = program_of(command)
    if program is None:
        return []
    # The training environment is on a local job's PATH; a Slurm node has the system's.
    default_path = job_path() if settings.TRAINYARD_BACKEND == "local" else JOB_PATH
    refused = not_runnable(run_as, program, env.get("PATH", default_path))
    if refused is None:
        return []
    return [
        f"The job runs as {run_as.name}, who may not run {refused} (it is missing, or "
        f"{run_as.name} may not execute it): {SUGGESTION}."
    ]
