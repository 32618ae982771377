"""A job trace as the simulator replays it: who asked for how many GPUs, when, for how long."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and, where known, the row."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    vc: str
    submitted: float  # seconds from the start of the trace's collection
    duration: float  # run time once started, in seconds
    gpus: int
    user: str = ""  # where the trace names one (Philly)


@dataclass(frozen=True)
class Trace:
    """Jobs in submission order (ties keep the order of the source)."""

    name: str
    jobs: tuple[TraceJob, ...]
    skipped: int = 0  # jobs of the source left out (no run, no GPUs), counted for the report

    @classmethod
    def of(
        cls, name: str, jobs: list[TraceJob], skipped: int = 0, limit: int | None = None
    ) -> Trace:
        ordered = sorted(jobs, key=lambda job: job.submitted)  # stable: keeps source order
        if limit is not None:
            ordered = ordered[:limit]
        return cls(name, tuple(ordered), skipped)

    @property
    def vcs(self) -> list[str]:
        return sorted({job.vc for job in self.jobs})

    @property
    def span(self) -> float:
        """Seconds from the first submission to the last (what a cluster is sized over)."""
        if not self.jobs:
            return 0.0
        return self.jobs[-1].submitted - self.jobs[0].submitted

    @property
    def gpu_seconds(self) -> float:
        return sum(job.gpus * job.duration for job in self.jobs)

    def gpu_seconds_by_vc(self) -> dict[str, float]:
        offered: dict[str, float] = defaultdict(float)
        for job in self.jobs:
            offered[job.vc] += job.gpus * job.duration
        return dict(offered)
