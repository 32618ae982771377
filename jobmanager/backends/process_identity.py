"""Whether a recorded pid is still the process that was started, and not another that got
the pid after it ended.

A process is told by its start time in clock ticks since boot: field 22 (``starttime``) of
``/proc/<pid>/stat``, which the kernel sets once at fork and which is compared exactly. A
wall-clock start time (what psutil's ``create_time`` gives) is those ticks plus the boot
time that ``/proc/stat``'s ``btime`` reports, which moves whenever the clock is stepped:
every running job was once taken for dead after such a move. Records written before the
ticks were (a wall-clock ``create_time`` alone) are still compared as they were then, within
``LEGACY_SAME_START_SECONDS``, so jobs running across an upgrade are kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import psutil

START_TICKS = "start_ticks"
LEGACY_CREATE_TIME = "create_time"
LEGACY_SAME_START_SECONDS = 0.05  # a pid whose start time differs more is another process
STARTTIME_FIELD = 22  # of /proc/<pid>/stat, counted from 1 as proc(5) does


def start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot (None when there is no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The name (field 2) is in parentheses and may hold spaces or ')': the fields after it
    # start after the last ')', with field 3.
    after_name = text[text.rindex(b")") + 2 :].split()
    return int(after_name[STARTTIME_FIELD - 3])


def record_of(pid: int) -> dict[str, Any]:
    """What to keep of a process just started to know it again later: its start ticks,
    and its wall-clock start for an older version reading the same record."""
    record: dict[str, Any] = {START_TICKS: start_ticks(pid), LEGACY_CREATE_TIME: None}
    with contextlib.suppress(psutil.NoSuchProcess):
        record[LEGACY_CREATE_TIME] = psutil.Process(pid).create_time()
    return record


def is_recorded(process: psutil.Process, record: Mapping[str, Any]) -> bool:
    """Whether ``process`` is the one ``record`` was made of (False when nothing was
    recorded). Raises psutil.Error when the process cannot be looked at."""
    ticks: int | None = record.get(START_TICKS)
    if ticks is not None:
        return start_ticks(process.pid) == ticks
    create_time: float | None = record.get(LEGACY_CREATE_TIME)
    if create_time is None:
        return False
    return abs(process.create_time() - create_time) <= LEGACY_SAME_START_SECONDS
