"""The jobs a backend holds a state for, listed apart from its state directory.

A backend keeps ``<state dir>/<job id>/state.json`` while it holds a job; the job's
directory stays after it, with the job's own working directory (``work/``), so listing
the state directory cost every reconcile a look into each job that ever ran there (49 ms a
round after 5,000 jobs). ``<state dir>/.live/`` holds an empty file per job with a state,
named by its id: made before the job's first state is written, removed once its state is
gone; a crash between the two leaves a name without a state, which is skipped. A state
directory from before the list is listed once, when a backend first opens it.
"""

from __future__ import annotations

import os
from pathlib import Path

LIVE_DIR = ".live"
COMPLETE = ".complete"  # in the list: every job of the state directory is listed
STATE_FILE = "state.json"


class LiveJobs:
    """The list of the jobs with a state in ``state_dir`` (root's, mode 0700)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.directory = state_dir / LIVE_DIR
        if not (self.directory / COMPLETE).exists():
            self.directory.mkdir(mode=0o700, exist_ok=True)
            for path in state_dir.glob(f"*/{STATE_FILE}"):
                _touch(self.directory / path.parent.name)
            _touch(self.directory / COMPLETE)

    def before_state(self, job_id: str) -> None:
        """List the job before its state is first written (``job_id`` checked already)."""
        if not (self.state_dir / job_id / STATE_FILE).exists():
            _touch(self.directory / job_id)

    def discard(self, job_id: str) -> None:
        """Unlist the job, its state gone."""
        (self.directory / job_id).unlink(missing_ok=True)

    def names(self) -> list[str]:
        """The ids of the jobs listed, sorted."""
        return sorted(name for name in os.listdir(self.directory) if not name.startswith("."))


def _touch(path: Path) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    os.close(descriptor)
