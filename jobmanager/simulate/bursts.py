"""Submission bursts in a replay (jobmanager.core.bursts): which burst each job joins at
submission, and the service each burst's started jobs have shown, as the scheduler would
see it at the time (never a waiting job's own duration)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any


class BurstService(Mapping[str, float]):
    """Bursts by key; ``get(burst)`` at ``now``: the mean of its ended jobs' run times and
    its running jobs' times so far (0.0 while none of its jobs has started)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.now = 0.0
        # kind -> (last submission, burst)
        self._last: dict[tuple[Any, ...], tuple[float, str]] = {}
        self._count = 0
        self._ended: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        self._running: dict[str, dict[str, float]] = defaultdict(dict)  # burst -> id -> start

    def join(self, vc: str, user: str, gpus: int, submitted: float) -> str:
        """The burst of a job submitted now: its kind's last one's, if within the window."""
        kind = (vc, user, gpus)
        last = self._last.get(kind)
        if last is not None and submitted - last[0] <= self.window:
            burst = last[1]
        else:
            self._count += 1
            burst = f"b{self._count}"
        self._last[kind] = (submitted, burst)
        return burst

    def started(self, burst: str, job_id: str, now: float) -> None:
        self._running[burst][job_id] = now

    def stopped(self, burst: str, job_id: str, now: float, ended: bool) -> None:
        start = self._running[burst].pop(job_id, None)
        if ended and start is not None:
            totals = self._ended[burst]
            totals[0] += now - start
            totals[1] += 1

    def __getitem__(self, burst: str) -> float:
        total, count = self._ended.get(burst, (0.0, 0))
        running = self._running.get(burst)
        if running:
            total += sum(self.now - start for start in running.values())
            count += len(running)
        if not count:
            raise KeyError(burst)
        return total / count

    def get(self, burst: str, default: float = 0.0) -> float:  # type: ignore[override]
        try:
            return self[burst]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        return iter(set(self._ended) | set(self._running))

    def __len__(self) -> int:
        return len(set(self._ended) | set(self._running))
