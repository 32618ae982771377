"""The scan on real trees: usage per owner, VC and top-level directory, hard links once,
symlinks never followed, progress while it runs; and the same total as ``du``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from storagemanager.paths import UnsafePath
from storagemanager.scan import scan_root


def write(path: Path, size: int, uid: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    if uid is not None:
        os.chown(path, uid, -1)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    write(root / "vcs" / "vision" / "alice" / "model.pt", 300_000, uid=1001)
    write(root / "vcs" / "vision" / "bob" / "data.bin", 120_000, uid=1002)
    write(root / "vcs" / "speech" / "carol" / "wav.tar", 50_000, uid=1003)
    write(root / "home" / "alice" / "notes.txt", 4_000, uid=1001)
    # A hard link: the same 200 KB under two names.
    shared = write(root / "vcs" / "vision" / "alice" / "shared.bin", 200_000, uid=1001)
    os.link(shared, root / "vcs" / "vision" / "bob" / "shared-link.bin")
    # A symlink to a big file outside the root, and one to a directory outside it.
    outside = tmp_path / "outside"
    write(outside / "huge.bin", 2_000_000)
    (root / "home" / "alice" / "huge-link").symlink_to(outside / "huge.bin")
    (root / "home" / "escape").symlink_to(outside, target_is_directory=True)
    return root


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to other uids needs root")
def test_usage_is_split_by_owner_vc_and_top_directory(tree: Path):
    result = scan_root(str(tree), vc_parent="vcs")

    kib = 1024
    alice, bob, carol = result.by_uid[1001], result.by_uid[1002], result.by_uid[1003]
    # model.pt + shared.bin (once, although it has two names) + notes.txt
    assert alice.files == 3
    assert alice.apparent_bytes == 300_000 + 200_000 + 4_000
    assert bob.files == 1 and bob.apparent_bytes == 120_000
    assert carol.files == 1 and carol.bytes >= 48 * kib
    assert set(result.by_vc) == {"vision", "speech"}
    assert result.by_vc["vision"].files == 3
    assert result.by_vc["speech"].apparent_bytes >= 50_000
    assert set(result.by_top) == {"vcs", "home"}
    # Nothing of the 2 MB file outside the root is counted, through either symlink.
    assert result.total.apparent_bytes < 1_000_000
    assert [large.path for large in result.largest[:3]] == [
        "vcs/vision/alice/model.pt",
        "vcs/vision/alice/shared.bin",
        "vcs/vision/bob/data.bin",
    ]
    assert result.largest[0].vc == "vision" and result.largest[0].uid == 1001


def test_disk_usage_matches_du(tree: Path):
    result = scan_root(str(tree))

    du = subprocess.run(["du", "-s", "-B1", str(tree)], capture_output=True, text=True)
    du_bytes = int(du.stdout.split()[0])
    root_blocks = os.lstat(tree).st_blocks * 512  # du counts the root directory itself
    assert result.total.bytes + root_blocks == du_bytes


def test_progress_is_reported_while_the_scan_runs(tmp_path: Path):
    for index in range(5):
        write(tmp_path / "r" / f"d{index}" / "f", 10)
        write(tmp_path / "r" / f"d{index}" / "g", 10)
    seen: list[int] = []

    scan_root(str(tmp_path / "r"), progress=lambda files, _: seen.append(files), progress_every=3)

    # Reported as directories finish: after 4 files (>= 3), after 8 (>= 4 + 3), at the end.
    assert seen == [4, 8, 10]


def test_a_root_reached_through_a_symlink_or_dotdot_is_refused(tmp_path: Path):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")

    with pytest.raises(UnsafePath):
        scan_root(str(tmp_path / "alias"))
    with pytest.raises(UnsafePath):
        scan_root(f"{tmp_path}/real/../real")
