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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.contrib.auth.models import User

PATH_FIELDS = ("working_dir", "data_path", "output_path")
SHARED = "shared"


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


def resolved(path: str) -> str:
    """The path with every symlink on the way resolved (as far as it exists)."""
    return os.path.realpath(path)


def is_under(path: str, root: str) -> bool:
    root_path, candidate = PurePosixPath(resolved(root)), PurePosixPath(path)
    return candidate == root_path or root_path in candidate.parents


def path_errors(path: str, roots: list[AllowedRoot]) -> list[str]:
    """Why ``path`` may not be used ([] when it may); empty paths are the job's own."""
    if not path:
        return []
    real = resolved(path)
    if any(is_under(real, root.path) for root in roots):
        return []
    named = "; ".join(f"{root.what} {root.path}" for root in roots)
    shown = path if real == os.path.normpath(path) else f"{path} (a link to {real})"
    return [
        f"{shown} is not under a directory you may use: the job's own directory (leave this "
        f"empty){'; ' + named if named else ''}."
    ]


def job_path_errors(
    owner: User, vc_name: str, home: str, paths: dict[str, str]
) -> dict[str, list[str]]:
    """Errors by field for the job's paths (only fields with a path are looked at)."""
    given = {name: value for name, value in paths.items() if value}
    if not given:
        return {}
    roots = allowed_roots(owner, vc_name, home)
    errors = {name: path_errors(value, roots) for name, value in given.items()}
    return {name: messages for name, messages in errors.items() if messages}
