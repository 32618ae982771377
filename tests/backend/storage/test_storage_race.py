"""A tenant races the storage manager (which runs as root): bob's processes, under his own
Unix account, swap his directories for symlinks to alice's protected checkpoints and to a
root-owned directory outside the root, while an expiry pass or a scan runs.

Two of bob's processes race: one swaps a directory in a loop, as fast as it can (the
attack as measured); the other answers the storage manager's pause points
(``storagemanager.paths.pause_point``), so that the window between a file's last check and
its deletion, or between listing a directory and entering a subdirectory, holds a swap
every time rather than by luck.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from backend.storage import actions
from backend.storage.models import LargestPath, RunStatus, StorageRoot
from jobmanager.backends import RunAs
from storagemanager.paths import PAUSE_AT_ENV, PAUSE_SOCKET_ENV
from tests.deadlines import deadline_after, pauses
from tests.storagemanager.trees import cut_off, make_files
from tests.unix_accounts import (
    JOB_PYTHON,
    job_account,
    owned_directory,
    reachable_directory,
    readable_script,
)

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="a tenant's account and root's expiry"),
]

# Bob's program. "window SOCKET SWAPS": answer each pause point, first swapping the
# directory that holds the path it names when SWAPS maps it to a target. "loop SWAPS":
# swap every directory of SWAPS for its symlink and back, over and over.
RACER = """
import json, os, socket, sys

def swap(directory, target):
    try:
        os.rename(directory, directory + ".orig")
        os.symlink(target, directory)
    except OSError:
        pass

def restore(directory):
    try:
        os.unlink(directory)
        os.rename(directory + ".orig", directory)
    except OSError:
        pass

mode, swaps = sys.argv[1], json.loads(sys.argv[-1])
if mode == "loop":
    while True:
        for directory, target in swaps.items():
            swap(directory, target)
        for directory in swaps:
            restore(directory)
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[2])
listener.listen()
while True:
    connection, _ = listener.accept()
    with connection, connection.makefile() as lines:
        point, path = lines.readline().split(" ", 1)
        target = swaps.get(os.path.dirname(path.strip()))
        if target:
            swap(os.path.dirname(path.strip()), target)
        connection.sendall(b"go\\n")
"""


class Racers:
    """Bob's two racing processes, stopped when the test ends."""

    def __init__(self, directory: Path, bob: RunAs) -> None:
        self.script = readable_script(directory, "racer.py", RACER)
        self.socket = owned_directory(directory / "bob-socket", bob) / "pause.sock"
        self.bob = bob
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, mode: str, swaps: dict[str, str]) -> None:
        arguments = [str(self.socket)] if mode == "window" else []
        command = [JOB_PYTHON, "-I", str(self.script), mode, *arguments, json.dumps(swaps)]
        bob = self.bob
        process = subprocess.Popen(command, user=bob.uid, group=bob.gid, extra_groups=[])
        self.processes.append(process)
        if mode == "window":
            deadline = deadline_after(10)
            for pause in pauses():
                if self.socket.exists() or time.monotonic() > deadline:
                    break
                time.sleep(pause)
            assert self.socket.exists(), "bob's racer did not listen"

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def race(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Racers]]:
    """A directory every account may pass through, with bob's racers; the storage
    manager's pause points answered by bob's window racer."""
    bob = job_account("bob")
    with reachable_directory() as directory:
        racers = Racers(directory, bob)
        monkeypatch.setenv(PAUSE_SOCKET_ENV, str(racers.socket))
        try:
            yield directory, racers
        finally:
            racers.stop()


def shared_root(path: Path) -> Path:
    """A storage root that every account may pass through, whatever the umask."""
    path.mkdir()
    path.chmod(0o755)
    return path


def owned_files(directory: Path, account: RunAs, count: int = 1) -> list[str]:
    """Old files (atime and mtime 400 days ago) in ``directory``, both given to
    ``account`` (chown changes ctime: call this before the cut-off)."""
    paths = make_files(directory, count, size=100, old=True, stem="ckpt")
    for path in [str(directory), *paths]:
        shutil.chown(path, account.uid, account.gid)
    return paths


def test_bob_swapping_directories_for_symlinks_cannot_make_expiry_delete_others_files(
    race, monkeypatch
):
    directory, racers = race
    alice, bob = job_account("alice"), job_account("bob")
    root, outside = directory / "scratch", directory / "outside"
    shared_root(root)
    owned_directory(root / "alice", alice)
    [protected] = owned_files(root / "alice" / "checkpoints", alice)
    [system] = make_files(outside, 1, size=100, old=True, stem="ckpt")  # root's own
    owned_directory(root / "bob", bob, 0o755)
    targets = [str(root / "alice" / "checkpoints"), str(outside)]
    window = {f"{root}/bob/w{n:02d}": targets[n % 2] for n in range(10)}
    looped = {f"{root}/bob/l{n:02d}": targets[n % 2] for n in range(40)}
    own = [path for planted in [*window, *looped] for path in owned_files(Path(planted), bob)]
    cut = cut_off(root)
    expiry = StorageRoot.objects.create(
        name=f"race-{os.getpid()}", path=str(root), expiry_days=30, warn_days=1,
        never_expire="alice/checkpoints", delete_rate=0,
    )  # fmt: skip
    racers.start("window", window)
    racers.start("loop", looped)
    monkeypatch.setenv(PAUSE_AT_ENV, "expiry-unlink")

    run = actions.run_expiry(expiry, dry_run=False, now=_days_after(cut, 30))

    assert run.status == RunStatus.DONE, run.error
    assert all(os.path.islink(planted) for planted in window), "bob swapped every window"
    survivors = {"alice's protected checkpoint": protected, "root's file outside": system}
    assert {name: _intact(path) for name, path in survivors.items()} == dict.fromkeys(
        survivors, True
    )
    # Bob's own files in the swapped directories still went, from where they were when
    # checked: the directories renamed aside.
    assert not any(os.path.lexists(f"{planted}.orig/ckpt000000") for planted in window)
    assert len(window) <= run.deleted_files <= len(own)


def test_bob_swapping_a_directory_mid_scan_cannot_make_it_count_what_is_outside(race, monkeypatch):
    directory, racers = race
    bob = job_account("bob")
    root, outside = directory / "scratch", directory / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "huge.bin").write_bytes(b"\0" * 4_000_000)  # root's own
    shared_root(root)
    owned_directory(root / "bob", bob, 0o755)
    owned_files(root / "bob" / "runs" / "deep", bob)
    shutil.chown(root / "bob" / "runs", bob.uid, bob.gid)
    scanned = StorageRoot.objects.create(name=f"race-scan-{os.getpid()}", path=str(root))
    # Entering bob/runs/deep, the scan finds bob/runs swapped for a symlink to outside/.
    racers.start("window", {f"{root}/bob/runs": str(outside)})
    monkeypatch.setenv(PAUSE_AT_ENV, "walk-enter")

    record = actions.scan(scanned)

    assert record.status == RunStatus.DONE, record.error
    assert os.path.islink(root / "bob" / "runs"), "bob swapped it"
    assert record.files_seen == 1 and record.bytes_seen < 1_000_000
    assert list(LargestPath.objects.filter(scan=record).values_list("path", flat=True)) == [
        "bob/runs/deep/ckpt000000"
    ]


def _intact(path: str) -> bool:
    return os.path.exists(path) and Path(path).read_bytes() == b"x" * 100


def _days_after(epoch: float, days: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC) + timedelta(days=days)
