"""Run-time estimates for backfill, learned from the jobs that finished: how long each
user's similar jobs (same VC, same GPUs) really ran (jobmanager.core.estimates).

A process keeps its estimator between job manager rounds and folds in only the finished
jobs written since: reading the last 2,000 finished jobs anew was a good part of every
round once a burst had finished (12 ms of a 62 ms round of a few starts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from backend.jobs.models import Job, JobStatus
from jobmanager.core.estimates import RunTimeEstimator

HISTORY_JOBS = 2000  # the most recent finished jobs read
# Rows are read again this far behind the latest one folded in, so that a job whose end
# committed after a later-written one was read is not missed; each is folded in once.
# Short: in a burst every row within it is read again each round (a later commit than
# this only leaves one run out of the estimates).
OVERLAP = timedelta(seconds=3)
REMEMBERED = 5 * HISTORY_JOBS  # the jobs folded in that are known not to fold again
COLUMNS = ("pk", "vc__name", "owner__username", "workers", "gpus_per_worker",
           "started_at", "finished_at", "updated_at")  # fmt: skip


@dataclass
class _Learned:
    estimator: RunTimeEstimator = field(default_factory=RunTimeEstimator)
    latest: tuple[int, datetime] | None = None  # pk and write of the latest row folded in
    folded: dict[int, None] = field(default_factory=dict)  # pks, oldest first

    def fold(self, rows: Iterable[tuple]) -> None:
        """Observe the rows not folded in yet, in the order their jobs finished."""
        new = sorted(
            (row for row in rows if row[0] not in self.folded and row[5] and row[6]),
            key=lambda row: (row[6], row[0]),
        )
        for pk, vc, user, workers, gpus_per_worker, started, finished, updated in new:
            seconds = (finished - started).total_seconds()
            self.estimator.observe(vc, user, workers * gpus_per_worker, max(seconds, 0.0))
            self.folded[pk] = None
            if self.latest is None or updated >= self.latest[1]:
                self.latest = (pk, updated)
        for pk in list(self.folded)[: max(0, len(self.folded) - REMEMBERED)]:
            del self.folded[pk]


_learned: _Learned | None = None


def _finished_jobs():
    return Job.objects.filter(
        status=JobStatus.FINISHED, started_at__isnull=False, finished_at__isnull=False
    )


def _still_current(learned: _Learned) -> bool:
    """Whether the latest row folded in is still there as it was (not purged, rewritten,
    nor the database made anew, as between tests)."""
    if learned.latest is None:
        return not _finished_jobs().exists()
    pk, updated = learned.latest
    return _finished_jobs().filter(pk=pk, updated_at=updated).exists()


def learned_run_times() -> RunTimeEstimator:
    """What the finished jobs teach, each kind by its latest runs; from the last
    ``HISTORY_JOBS`` when learnt afresh."""
    global _learned
    if _learned is not None and _still_current(_learned):
        since = _finished_jobs()
        if _learned.latest is not None:
            since = since.filter(updated_at__gte=_learned.latest[1] - OVERLAP)
        _learned.fold(since.order_by("updated_at", "pk").values_list(*COLUMNS)[:HISTORY_JOBS])
        return _learned.estimator
    learned = _Learned()
    learned.fold(_finished_jobs().order_by("-finished_at").values_list(*COLUMNS)[:HISTORY_JOBS])
    _learned = learned
    return learned.estimator
