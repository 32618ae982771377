"""Named crash points, for tests that kill a process at a chosen step (as kill -9 would).

``TRAINYARD_CRASH_AT=point[,point...]`` makes a process that reaches one of the named
points SIGKILL itself there. With ``TRAINYARD_CRASH_ONCE_DIR``, only the first process to
reach each point dies (a marker file per point, created exclusively), so that what
restarts after the crash goes on. Unset, a crash point costs one environment look-up.
"""

from __future__ import annotations

import os
import signal


def crash_point(name: str) -> None:
    """Die here, at once and without clean-up, if the environment names this point."""
    points = os.environ.get("TRAINYARD_CRASH_AT")
    if not points or name not in points.split(","):
        return
    once = os.environ.get("TRAINYARD_CRASH_ONCE_DIR")
    if once:
        try:
            os.close(os.open(os.path.join(once, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
