"""Where a job's paths may point: only under roots its owner may use.

``working_dir``, ``data_path`` and ``output_path`` must lie, once symlinks are resolved,
under one of:

- the job's own directory: the default, when the field is left empty;
- the owner's home (their Unix account's, on this host);
- a storage root of the storage manager, where its path convention gives the owner or
  the owner's VC: ``<root>[/<vc_directory>]/<vc>/<user>/...`` for any VC the owner is
  in, ``<root>[/<vc_directory>]/<vc>/shared/...`` for the job's VC, and on roots whose
  VCs own no directory ``<root>/<user>/...``.

The check is made at submit and again at deploy (a path may have changed meanwhile);
what finally enforces it is the job's uid, which the kernel checks on every access.

Paths are resolved as the owner, not as the portal: a short-lived child running coreutils'
``realpath`` with the owner's uid, gid and groups (the portal's own account in single-user
mode), one per check, so a link is followed only as far as the owner could follow it, and an
error names the path as given, never where it leads: the portal, as root, could otherwise
read names in another tenant's private home, or another tenant's process's working
directory through ``/proc/<pid>/cwd``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from jobmanager.backends.host_accounts import can_switch_users

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from jobmanager.backends import RunAs

PATH_FIELDS = ("working_dir", "data_path", "output_path")
SHARED = "shared"
REALPATH = shutil.which("realpath") or "/usr/bin/realpath"  # coreutils
# util-linux: it switches the account after the exec, so that the portal, large as it is,
# is not forked to switch it (measured: 12 ms a check, 41 ms with subprocess's own user=)
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
RESOLVE_TIMEOUT_SECONDS = 10  # a hung network mount must not hold a submission forever


class PathCheckFailed(RuntimeError):
    """The paths could not be resolved as the owner (the child failed or took too long)."""


@dataclass(frozen=True)
class AllowedRoot:
    path: str
    what: str  # in words, for the error: "your home", "VC vision's shared directory"


def allowed_roots(owner: User, vc_name: str, home: str) -> list[AllowedRoot]:
    """The roots the owner's job in ``vc_name`` may use (beyond its own directory)."""
    from backend.storage.models import StorageRoot
    from backend.vcs.models import Membership

    username = owner.get_username()
    roots = [AllowedRoot(home, "your home")] if home else []
    if username in ("", ".", "..", SHARED):
        return roots  # no directory can be named after such a user
    own_vcs = sorted(
        set(Membership.objects.filter(user=owner).values_list("vc__name", flat=True)) | {vc_name}
    )
    for root in StorageRoot.objects.order_by("name"):
        if not root.vc_directory:
            roots.append(AllowedRoot(f"{root.path}/{username}", f"your directory on {root.name}"))
            continue
        base = root.path.rstrip("/")
        if root.vc_directory.strip("/") not in ("", "."):
            base = f"{base}/{root.vc_directory.strip('/')}"
        for vc in own_vcs:
            roots.append(AllowedRoot(f"{base}/{vc}/{username}", f"your directory on {root.name}"))
        roots.append(AllowedRoot(f"{base}/{vc_name}/{SHARED}", f"VC {vc_name}'s shared directory"))
    return roots


def resolved_as(run_as: RunAs | None, paths: Iterable[str]) -> dict[str, str]:
    """Each absolute path with every symlink on the way resolved as far as ``run_as`` may
    look (the portal's own account when None); what it may not look into is kept as
    written, and missing parts are allowed. Raises PathCheckFailed."""
    unique = sorted(set(paths))
    if not unique:
        return {}
    command = [REALPATH, "--canonicalize-missing", "--zero", "--", *unique]
    try:
        done = subprocess.run(
            [*as_account(run_as), *command],
            capture_output=True,
            cwd="/",
            env={"LC_ALL": "C"},
            timeout=RESOLVE_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise PathCheckFailed(f"the paths could not be checked: {error}") from error
    results = [os.fsdecode(part) for part in done.stdout.split(b"\0")[:-1]]
    if done.returncode != 0 or len(results) != len(unique):
        reason = os.fsdecode(done.stderr).strip() or f"realpath exited {done.returncode}"
        raise PathCheckFailed(f"the paths could not be checked: {reason}")
    return dict(zip(unique, results, strict=True))


def as_account(run_as: RunAs | None) -> list[str]:
    """What runs a command as ``run_as``, uid, gid and groups alike: nothing when None, or
    where this process may not switch accounts (not root: it runs as its own, as a portal on
    Kubernetes may)."""
    if run_as is None or not can_switch_users():
        return []
    groups = f"--groups={','.join(map(str, run_as.groups))}" if run_as.groups else "--clear-groups"
    return [SETPRIV, f"--reuid={run_as.uid}", f"--regid={run_as.gid}", groups, "--"]


def is_under(real: str, real_root: str) -> bool:
    root_path, candidate = PurePosixPath(real_root), PurePosixPath(real)
    return candidate == root_path or root_path in candidate.parents


def path_errors(path: str, real: dict[str, str], roots: list[AllowedRoot]) -> list[str]:
    """Why ``path`` may not be used ([] when it may), with ``real`` the resolutions of the
    path and the roots. The error names the path as given: where a link leads is not told."""
    if any(is_under(real[path], real[root.path]) for root in roots):
        return []
    named = "; ".join(f"{root.what} {root.path}" for root in roots)
    linked = real[path] != os.path.normpath(path)
    shown = f"{path} (through a symbolic link)" if linked else path
    return [
        f"{shown} is not under a directory you may use: the job's own directory (leave this "
        f"empty){'; ' + named if named else ''}."
    ]


def job_path_errors(
    owner: User, vc_name: str, home: str, paths: dict[str, str], run_as: RunAs | None
) -> dict[str, list[str]]:
    """Errors by field for the job's paths (only fields with a path are looked at), the
    paths and roots resolved as ``run_as`` (the portal's own account when None)."""
    given = {name: value for name, value in paths.items() if value}
    if not given:
        return {}
    roots = allowed_roots(owner, vc_name, home)
    try:
        real = resolved_as(run_as, [*given.values(), *(root.path for root in roots)])
    except PathCheckFailed as error:
        return {name: [f"{value}: {error}."] for name, value in given.items()}
    errors = {name: path_errors(value, real, roots) for name, value in given.items()}
    return {name: messages for name, messages in errors.items() if messages}
