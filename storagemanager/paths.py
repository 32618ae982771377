"""Path safety: nothing the storage manager deletes may lie outside its root.

A path is safe to delete when it is written without ``..``, lies under the root, no
directory on the way to it is a symlink, and it sits on the root's own filesystem (not
under a mount point inside the root).
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath


class UnsafePath(ValueError):
    """The path is outside the root, or reaches it through a symlink or a mount point."""


def check_root(root: str) -> os.stat_result:
    """The root's own stat; it must be an absolute, real directory (no symlink in it)."""
    if not os.path.isabs(root) or ".." in PurePosixPath(root).parts:
        raise UnsafePath(f"{root}: a root must be an absolute path without '..'")
    if os.path.realpath(root) != os.path.normpath(root):
        raise UnsafePath(f"{root}: a root must not go through a symlink")
    root_stat = os.lstat(root)
    if not stat.S_ISDIR(root_stat.st_mode):
        raise UnsafePath(f"{root}: not a directory")
    return root_stat


def check_inside(root: str, path: str, root_dev: int) -> os.stat_result:
    """The lstat of ``path`` once it is known to be under ``root`` on the root's device,
    reached through real directories only; raise :class:`UnsafePath` otherwise."""
    if not os.path.isabs(path) or ".." in PurePosixPath(path).parts:
        raise UnsafePath(f"{path}: not an absolute path without '..'")
    normal_root = os.path.normpath(root)
    normal = os.path.normpath(path)
    if normal == normal_root or os.path.commonpath([normal_root, normal]) != normal_root:
        raise UnsafePath(f"{path}: outside {root}")
    parent = os.path.dirname(normal)
    # realpath of the parent equal to its written form: no symlinked directory on the way.
    if os.path.realpath(parent) != parent:
        raise UnsafePath(f"{path}: reached through a symlink")
    path_stat = os.lstat(normal)
    if path_stat.st_dev != root_dev or os.lstat(parent).st_dev != root_dev:
        raise UnsafePath(f"{path}: on another filesystem (a mount point inside the root)")
    return path_stat
