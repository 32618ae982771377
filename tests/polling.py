"""The suite's one poll: wait until a condition holds, or fail saying what was awaited.

Every test that waits for something another process or thread makes true polls through
``wait_until``: no sleep stands in for synchronisation. Its deadline is the one written
at the call, times the suite's scale (tests/deadlines.py), and its pauses back off.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tests.deadlines import SCALE, deadline_after, pauses

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Call ``condition`` until it returns something true, and return that value; raise
    ``AssertionError`` naming ``what`` and the last value seen once ``timeout`` seconds
    (as written, times the deadline scale) have passed. The condition is checked once
    more after the deadline, so a slow machine that got there in the end passes."""
    give_up, pause = deadline_after(timeout), pauses()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(
                f"timed out after {timeout} s (as written; x{SCALE:g} here) waiting for "
                f"{what}; the last check gave {value!r}"
            )
        time.sleep(next(pause))
