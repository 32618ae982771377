"""The local backend's resident spawner, run for a test as run_trainyard runs it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from jobmanager.backends.local import INIT_ENV, SPAWNER_SCRIPT


@contextlib.contextmanager
def running_spawner(socket_path: Path) -> Iterator[subprocess.Popen]:
    """The local backend's resident spawner (as run_trainyard starts it) on ``socket_path``,
    listening once this yields; killed afterwards (the inits it forked live on, as they do
    beyond any deployer)."""
    command = [sys.executable, "-I", "-S", str(SPAWNER_SCRIPT), "--socket", str(socket_path)]
    process = subprocess.Popen(
        command, env=dict(INIT_ENV), stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert "listening" in process.stdout.readline(), "the spawner did not start"
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        process.stdout.close()
