"""What is left of an ended sandboxed job, removed off the job manager's path.

The job manager removes ended jobs in each round, before it schedules the next ones. For a
job whose containers have all stopped (their pid namespaces, every process in them, gone
with their first processes; their cgroups removed by the inits) and are deleted, what is
left takes tens of ms a job and no decision waits on it: the job's network namespace
(an unmount, and the kernel's clean-up) and its bundles (removing a directory a container
mounted on waits for the kernel's RCU grace period, a few ms each, 30 a bundle).
``LocalBackend.remove`` moves those files into ``<state dir>/.removing/<job id>.<token>/``
(renames, into an entry no reaper takes until it is queued, filled), frees the job's devices
and returns; a thread of the backend's process (one at a time) removes the namespaces of all
the entries there, then the entries.
An entry a process left unfinished (it ended meanwhile) is finished by the next removal of
any process using the state directory. Nothing here is reused by a later deployment: each
namespace has a name of its own, and the job's directory is free once the files moved.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

TAKEN = ".taken-"  # an entry a reaper is finishing: its name, after this prefix
FILLING = ".filling-"  # an entry a removal is still moving files into: left alone
STALE_SECONDS = 300.0  # a taken entry that old was its reaper's when that reaper ended


class Reaper:
    """Finishes the removals queued in ``trash`` with ``finish`` (which is given entries'
    directories, each holding a job's state and bundles, and removes what they name, all at
    once where it can)."""

    def __init__(self, trash: Path, finish: Callable[[list[Path]], None]) -> None:
        self.trash = trash
        self._finish = finish
        self._lock = threading.Lock()
        self._wanted = False
        self._thread: threading.Thread | None = None

    def entry(self, job_id: str) -> Path:
        """A new entry of the trash for the job (made, root's alone), to move the job's
        files into and then ``queue``: no reaper takes it meanwhile (one running for an
        earlier removal would otherwise take it half filled)."""
        self.trash.mkdir(mode=0o700, exist_ok=True)
        entry = self.trash / f"{FILLING}{job_id}.{secrets.token_hex(4)}"
        entry.mkdir(mode=0o700)
        return entry

    def queue(self, entry: Path) -> Path:
        """The filled entry, made one for reapers to take."""
        queued = entry.with_name(entry.name.removeprefix(FILLING))
        os.rename(entry, queued)
        return queued

    def soon(self) -> None:
        """Finish every entry of the trash in this process's thread, started if none runs."""
        with self._lock:
            self._wanted = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()

    def wait(self) -> None:
        """Until this process's thread is done (for tests and the backend's end)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._wanted:
                    self._thread = None
                    return
                self._wanted = False
            self.finish_all()

    def finish_all(self) -> None:
        """Every entry of the trash no other reaper is finishing, finished now."""
        try:
            names = os.listdir(self.trash)
        except FileNotFoundError:
            return
        taken = [entry for entry in map(self._take, sorted(names)) if entry is not None]
        if taken:
            self._finish(taken)
        for entry in taken:
            shutil.rmtree(entry, ignore_errors=True)

    def _take(self, name: str) -> Path | None:
        """The entry, renamed as this reaper's (two never finish the same); None when
        another has it."""
        entry = self.trash / name
        if name.startswith((TAKEN, FILLING)):
            try:  # its reaper's (or removal's) process ended before it finished
                stale = time.time() - entry.stat().st_mtime > STALE_SECONDS
            except FileNotFoundError:
                return None
            if not stale:
                return None
            name = name.removeprefix(TAKEN).removeprefix(FILLING)
        taken = self.trash / f"{TAKEN}{name}"
        try:
            os.rename(entry, taken)
            os.utime(taken)
        except FileNotFoundError:
            return None
        return taken
