"""Path safety: the storage manager (root, on files that tenants write) never follows a
path that a tenant controls.

The root is opened once; every directory below it is opened relative to its parent's
descriptor, one name at a time, with ``O_NOFOLLOW`` (a symlink is refused, never
followed) and checked to be on the root's filesystem (a mount point inside the root is
refused). Files are looked at, deleted and removed through the descriptor of the directory
that holds them (``fstatat``/``unlinkat``/``rmdir`` with ``dir_fd``), never through a path
string the kernel would resolve again: a directory that a tenant swaps for a symlink
after it was checked changes nothing for a descriptor already held.

:func:`walk` goes down a tree this way (scans and expiry listings); :class:`HeldTree` finds
one path's directory this way (deletions). :func:`pause_point` lets a test act in a chosen
window, as a tenant's racing process would.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import TracebackType

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PAUSE_AT_ENV = "TRAINYARD_STORAGE_PAUSE_AT"
PAUSE_SOCKET_ENV = "TRAINYARD_STORAGE_PAUSE_SOCKET"
PAUSE_TIMEOUT_SECONDS = 30.0


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


def open_root(root: str) -> tuple[int, os.stat_result]:
    """A descriptor of the checked root (see :func:`check_root`) and its stat; the caller
    closes it."""
    checked = check_root(root)
    fd = os.open(root, _DIRECTORY_FLAGS)
    held = os.fstat(fd)
    if (held.st_dev, held.st_ino) != (checked.st_dev, checked.st_ino):
        os.close(fd)
        raise UnsafePath(f"{root}: replaced while it was opened")
    return fd, held


def open_subdirectory(
    parent_fd: int, name: str, root_dev: int, shown_as: str
) -> tuple[int, os.stat_result]:
    """The descriptor and stat of the directory ``name`` in the one ``parent_fd`` holds,
    never through a symlink and only on the root's filesystem; raise :class:`UnsafePath`
    otherwise (``shown_as`` names it in the message), OSError when it is gone."""
    if not name or "/" in name or name in (".", ".."):
        raise UnsafePath(f"{shown_as}: not a plain name")
    try:
        fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{shown_as}: not a directory (symlinks are never followed)") from None
        raise
    info = os.fstat(fd)
    if info.st_dev != root_dev:
        os.close(fd)
        raise UnsafePath(f"{shown_as}: on another filesystem (a mount point inside the root)")
    return fd, info


@dataclass(slots=True)
class Directory:
    """One directory of a :func:`walk`, open while the caller looks at it."""

    relative: str  # from the root, "" for the root itself
    fd: int
    stat: os.stat_result
    enter: list[str] = field(default_factory=list)  # the caller's choice of subdirectories


def walk(root: str, errors: list[str] | None = None) -> Iterator[Directory]:
    """Each directory under ``root``, the root first, depth first (of the subdirectories
    of one directory, the last one listed first). Before asking for the next one, the
    caller lists in ``enter`` the names of the subdirectories to go into (those it saw as
    directories on the root's filesystem); each is opened relative to its parent
    (:func:`open_subdirectory`). What cannot be opened is skipped, with a line in
    ``errors``. At most one descriptor per level of the tree is open at a time."""
    root_fd, root_stat = open_root(root)
    root = os.path.normpath(root)
    root_dev = root_stat.st_dev
    # (a directory's descriptor, its path from the root, the names still to go into)
    frames: list[tuple[int, str, list[str]]] = []
    current: Directory | None = Directory("", root_fd, root_stat)
    try:
        while current is not None:
            yield current
            if current.enter:
                frames.append((current.fd, current.relative, current.enter))
            else:
                os.close(current.fd)
            current = None
            while current is None and frames:
                parent_fd, parent, pending = frames[-1]
                if not pending:
                    frames.pop()
                    os.close(parent_fd)
                    continue
                name = pending.pop()
                relative = f"{parent}/{name}" if parent else name
                shown_as = f"{root}/{relative}"
                pause_point("walk-enter", shown_as)
                try:
                    fd, info = open_subdirectory(parent_fd, name, root_dev, shown_as)
                except UnsafePath as error:
                    if errors is not None:
                        errors.append(str(error))
                    continue
                except OSError as error:
                    if errors is not None:
                        errors.append(f"{shown_as}: {error.strerror}")
                    continue
                current = Directory(relative, fd, info)
    finally:
        if current is not None:  # yielded, or just opened: not in a frame yet
            os.close(current.fd)
        for parent_fd, _, _ in frames:
            os.close(parent_fd)


class HeldTree:
    """The root held open, and the directories of one path at a time opened below it
    (:func:`open_subdirectory`, from the root down). The last chain stays open for the
    next path, so that the files of one directory are all reached through one descriptor."""

    def __init__(self, root: str) -> None:
        self.root_fd, root_stat = open_root(root)
        self.root = os.path.normpath(root)
        self.dev = root_stat.st_dev
        self.chain: list[tuple[str, int]] = []  # (name, descriptor), from the root down

    def parts(self, path: str) -> list[str]:
        """The names from the root down to ``path``; raise :class:`UnsafePath` for a path
        with '..', or not under the root."""
        if not os.path.isabs(path) or ".." in PurePosixPath(path).parts:
            raise UnsafePath(f"{path}: not an absolute path without '..'")
        normal = os.path.normpath(path)
        prefix = self.root.rstrip("/") + "/"
        if not normal.startswith(prefix) or normal == prefix:
            raise UnsafePath(f"{path}: outside {self.root}")
        return normal[len(prefix) :].split("/")

    def directory(self, parts: list[str]) -> int:
        """The descriptor of the directory ``parts`` names (the root for none); it stays
        open until another chain replaces it or the tree is closed."""
        kept = 0
        while kept < min(len(parts), len(self.chain)) and self.chain[kept][0] == parts[kept]:
            kept += 1
        self._close_from(kept)
        fd = self.chain[-1][1] if self.chain else self.root_fd
        for name in parts[kept:]:
            shown_as = "/".join([self.root, *parts[: len(self.chain) + 1]])
            fd, _ = open_subdirectory(fd, name, self.dev, shown_as)
            self.chain.append((name, fd))
        return fd

    def forget(self, parts: list[str]) -> None:
        """Close what is held at ``parts`` and below (it is about to go)."""
        held = [name for name, _ in self.chain[: len(parts)]]
        if parts and held == parts:
            self._close_from(len(parts) - 1)

    def _close_from(self, level: int) -> None:
        while len(self.chain) > level:
            os.close(self.chain.pop()[1])

    def close(self) -> None:
        self._close_from(0)
        os.close(self.root_fd)

    def __enter__(self) -> HeldTree:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def pause_point(name: str, path: str) -> None:
    """Wait for a test's go-ahead here if ``TRAINYARD_STORAGE_PAUSE_AT`` names this point:
    send "NAME PATH" on a line to the Unix socket ``TRAINYARD_STORAGE_PAUSE_SOCKET`` and go
    on when the peer answers or closes (30 s at most). Unset, it costs one look-up."""
    points = os.environ.get(PAUSE_AT_ENV)
    if not points or name not in points.split(","):
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(PAUSE_TIMEOUT_SECONDS)
        connection.connect(os.environ[PAUSE_SOCKET_ENV])
        connection.sendall(f"{name} {path}\n".encode())
        connection.recv(64)
