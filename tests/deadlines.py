"""How long the suite's polls wait before they give up.

A poll returns as soon as its condition holds, so its deadline costs nothing when a test
passes; it only bounds how long a broken test takes to fail. The deadlines written in the
tests suit a quiet machine. CI and shared machines run the suite in three processes on
two cores, and can be several times slower, so every deadline is multiplied by
``TRAINYARD_TEST_DEADLINE_SCALE`` (3 unless set; 1 gives the written deadlines).
"""

from __future__ import annotations

import os
import time

SCALE = float(os.environ.get("TRAINYARD_TEST_DEADLINE_SCALE", "3"))


def deadline_after(seconds: float) -> float:
    """The ``time.monotonic()`` at which a poll of ``seconds`` (as written) gives up."""
    return time.monotonic() + seconds * SCALE
