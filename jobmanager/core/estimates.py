"""Run-time estimates learned from history: how long a user's similar jobs really ran.

Users' wall-time limits are generous, so backfill reservations plan by what similar jobs
of the same user (same VC, same GPU count) ran, then the VC's jobs of that size, then the
VC's, then everyone's; never longer than the job's own wall time. The simulator feeds it
each job as it ends (never the trace's duration in advance); the live system from the
jobs that finished.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

HISTORY = 20  # the last jobs of a kind that an estimate averages


class RunTimeEstimator:
    def __init__(self, history: int = HISTORY, default: float | None = None) -> None:
        self.default = default
        self._history = history
        self._runs: dict[tuple[Any, ...], deque[float]] = defaultdict(lambda: deque(maxlen=history))
        self._sums: dict[tuple[Any, ...], float] = defaultdict(float)

    @staticmethod
    def _kinds(vc: str, user: str, gpus: int) -> tuple[tuple[Any, ...], ...]:
        return (("user", vc, user, gpus), ("size", vc, gpus), ("vc", vc), ("all",))

    def observe(self, vc: str, user: str, gpus: int, seconds: float) -> None:
        """A job of this kind ran this long."""
        for kind in self._kinds(vc, user, gpus):
            runs = self._runs[kind]
            if len(runs) == runs.maxlen:
                self._sums[kind] -= runs[0]
            runs.append(seconds)
            self._sums[kind] += seconds

    def estimate(
        self, vc: str, user: str, gpus: int, wall_time: float | None = None
    ) -> float | None:
        """The mean run of the most specific kind with history, capped by the wall time;
        the wall time (or the default) without history."""
        for kind in self._kinds(vc, user, gpus):
            runs = self._runs.get(kind)
            if runs:
                mean = self._sums[kind] / len(runs)
                return mean if wall_time is None else min(mean, wall_time)
        return wall_time if wall_time is not None else self.default
