"""How long the suite's polls wait before they give up.

A poll returns as soon as its condition holds, so its deadline costs nothing when a test
passes; it only bounds how long a broken test takes to fail. The deadlines written in the
tests suit a quiet machine. CI and shared machines run the suite in three processes on
two cores, and can be several times slower, so every deadline is multiplied by
``TRAINYARD_TEST_DEADLINE_SCALE`` (3 unless set; 1 gives the written deadlines).

Polls back off (``pauses``): a condition that runs a job-manager pass or scans every
process costs CPU that the servers a test waits for need on a two-core machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

SCALE = float(os.environ.get("TRAINYARD_TEST_DEADLINE_SCALE", "3"))


def deadline_after(seconds: float) -> float:
    """The ``time.monotonic()`` at which a poll of ``seconds`` (as written) gives up."""
    return time.monotonic() + seconds * SCALE


FIRST_PAUSE = 0.05
LONGEST_PAUSE = 0.25


def pauses() -> Iterator[float]:
    """Seconds to sleep between a poll's checks: 50 ms at first, growing by half to 250 ms
    (a condition that holds soon is seen soon; a long wait checks four times a second)."""
    pause = FIRST_PAUSE
    while True:
        yield pause
        pause = min(pause * 1.5, LONGEST_PAUSE)
