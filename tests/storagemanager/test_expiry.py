"""Expiry on real trees: exactly the expired files go, file by file, and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

from storagemanager.expiry import Candidate, RateLimit, delete_expired, iter_candidates
from tests.storagemanager.trees import OLD, cut_off, make_files


def all_files(root: Path) -> set[str]:
    """Every non-directory under ``root``, symlinks included and never followed (following
    one would update its atime, and so its age)."""
    found: set[str] = set()
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    found.add(entry.path)
    return found


def test_a_tree_of_200000_files_loses_exactly_its_expired_files(fast_tmp: Path):
    tmp_path = fast_tmp
    root, outside = tmp_path / "root", tmp_path / "outside"
    old: set[str] = set()
    for index in range(100):
        old.update(make_files(root / f"old{index:03d}", 1000, old=True))
    # Old, but a hard link to it is made later: the link changes the inode's ctime.
    relinked = make_files(root / "links", 1, size=10, old=True)[0]
    # Old files outside the root, reached through a symlinked directory and a file link.
    outside_files = set(make_files(outside, 5, size=10, old=True))
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "escape-file").symlink_to(outside / "f000000")
    os.utime(root / "escape-file", (OLD, OLD), follow_symlinks=False)
    # The links themselves are old: they go, not what they point to.
    old.update({str(root / "escape-file"), str(root / "escape")})
    # Never-expire paths.
    kept = set(make_files(root / "datasets" / "imagenet", 3, old=True))
    cut = cut_off(tmp_path)

    new: set[str] = set()
    for index in range(100):
        new.update(make_files(root / f"new{index:03d}", 1000))
    new.update(make_files(root / "old000", 10, stem="new"))  # new files next to old ones
    # atime and mtime old, ctime new (chmod after the cut-off): in use, it must stay.
    touched = make_files(root / "touched", 1, old=True)[0]
    os.chmod(touched, 0o600)
    os.link(relinked, root / "links" / "second-name")
    before = all_files(root)
    assert len(before) >= 200_000

    candidates = iter_candidates(str(root), cut, never_expire=["datasets/*"])
    deletion = delete_expired(str(root), candidates, cut)

    after = all_files(root)
    assert after == before - old
    assert touched in after and relinked in after and kept <= after
    assert deletion.files == len(old) and not deletion.skipped
    assert all_files(outside) == outside_files
    # The emptied directories went too; those with new files stayed.
    assert not (root / "old001").exists() and (root / "old000").is_dir()


def test_a_dry_run_lists_expired_and_soon_expiring_files_and_deletes_nothing(tmp_path):
    expired = set(make_files(tmp_path / "a", 3, old=True))
    cut = cut_off(tmp_path)
    recent = set(make_files(tmp_path / "b", 2))

    listed = list(iter_candidates(str(tmp_path), cut, warn_before=cut + 3600))

    assert {c.path for c in listed if c.expired} == expired
    assert {c.path for c in listed if not c.expired} == recent
    assert all_files(tmp_path) == expired | recent


def test_deletion_refuses_paths_outside_or_through_symlinks(tmp_path: Path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    victims = make_files(outside, 2, old=True)
    (root / "via").symlink_to(outside, target_is_directory=True)
    forged = [
        Candidate(victims[0], 0, 0, OLD, True),  # outside the root
        Candidate(f"{root}/../outside/f000001", 0, 0, OLD, True),  # '..'
        Candidate(f"{root}/via/f000001", 0, 0, OLD, True),  # through a symlink
    ]

    deletion = delete_expired(str(root), forged, OLD + 1)

    assert deletion.files == 0 and len(deletion.skipped) == 3
    assert all_files(outside) == set(victims)


def test_a_file_used_since_the_listing_is_kept(tmp_path: Path):
    path = make_files(tmp_path, 1, old=True)[0]
    cut = cut_off(tmp_path)
    listed = list(iter_candidates(str(tmp_path), cut))
    os.utime(path)  # someone opens it before the deletion pass reaches it

    deletion = delete_expired(str(tmp_path), listed, cut)

    assert deletion.files == 0 and os.path.exists(path)
    assert deletion.skipped == [(path, "used since the scan")]


def test_deletion_goes_at_the_configured_rate():
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limit = RateLimit(4, clock=lambda: now[0], sleep=sleep)
    for _ in range(9):
        limit.wait()

    assert sum(slept) == 2.0  # 9 deletions at 4 a second: the last one 2 s after the first


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_listing_and_deleting_leave_no_directory_open(tmp_path: Path):
    for index in range(5):
        make_files(tmp_path / "root" / f"d{index}" / "inner", 2, old=True)
    (tmp_path / "root" / "d0" / "loop").symlink_to(tmp_path, target_is_directory=True)
    root = str(tmp_path / "root")
    cut = cut_off(tmp_path)
    before = open_descriptors()

    first = next(iter_candidates(root, cut))  # a listing given up half-way
    deletion = delete_expired(root, iter_candidates(root, cut), cut)

    assert first.expired and deletion.files == 11  # 10 files and the symlink
    assert deletion.directories == 10 and os.listdir(root) == []
    assert open_descriptors() == before
