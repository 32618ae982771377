"""run_trainyard's restart backoff on real processes (no database): a child that had been
running comes back at once; one that keeps dying backs off, but is never held down
longer than it ran before dying."""

from __future__ import annotations

import os
import signal
import sys
import time

from backend.operations.management.commands.run_trainyard import Child
from tests.polling import wait_until
from tests.servers import ROOT


def died(child: Child) -> int:
    """Wait for the child's process to end, then let the supervisor see it; its code."""
    process = child.process
    assert process is not None
    wait_until(lambda: process.poll() is not None, 30, f"{child.name} to die")
    code = child.exited()
    assert code is not None
    return code


def test_a_child_killed_while_serving_is_started_again_at_once():
    child = Child("server", [sys.executable, "-c", "import time; time.sleep(60)"],
                  dict(os.environ), ROOT)  # fmt: skip
    process = child.start()
    try:
        process.send_signal(signal.SIGKILL)
        assert died(child) == -signal.SIGKILL
        assert child.restart_at <= time.monotonic()
    finally:
        process.kill()
        process.wait()


def test_a_child_dying_while_starting_backs_off_but_is_down_no_longer_than_it_ran():
    command = [sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(3)"]
    child = Child("crashing", command, dict(os.environ), ROOT)
    delays = []
    for _ in range(5):  # the backoff would reach 8 s
        started = time.monotonic()
        child.start()
        assert died(child) == 3
        seen = time.monotonic()
        delay = child.restart_at - seen
        assert delay <= seen - started, f"down {delay:.2f} s after running {seen - started:.2f} s"
        delays.append(delay)
    assert delays[0] <= 0  # a first death restarts at once
    assert all(delay > 0 for delay in delays[1:]), delays  # then it backs off
