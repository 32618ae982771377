"""Throughput curves learned from a job's earlier runs (issue 34).

A job reports its throughput by printing a metrics line to its rank-0 log::

    trainyard: samples_per_second=1234.5 workers=4

(``workers`` optional: the job's size when left out). Logs are what every backend
already keeps for every job (backend/jobs/logs.py), and a job has no API credential of
its own, so a line in the log needs nothing new on any backend. The last such line in
the log's tail counts.

When a job with a deadline and its work is submitted without a curve, its curve is
learned from the reports of its owner's earlier jobs of the same name in the same VC
(an array's tasks and a sweep's share their name; the latest report at each size
wins): at sizes between two reports the lower one holds, below the smallest it scales
down linearly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from django.contrib.auth.models import User

from backend.jobs.logs import job_log_files
from backend.jobs.models import Job
from backend.vcs.models import VirtualCluster
from jobmanager.backends.confine import open_job_file

METRIC_LINE = re.compile(
    rb"^trainyard: samples_per_second=([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    rb"(?: workers=([0-9]+))?\s*$",
    re.MULTILINE,
)
TAIL_BYTES = 64 * 1024  # only a log's tail is read
EARLIER_RUNS = 20  # the most recent earlier jobs looked at


def last_report(log_tail: bytes, workers: int) -> tuple[int, float] | None:
    """The last metrics line in a log's tail: (workers, samples per second)."""
    found = None
    for match in METRIC_LINE.finditer(log_tail):
        rate = float(match[1])
        if rate > 0:
            found = (int(match[2]) if match[2] else workers, rate)
    return found


def curve_from_reports(reports: Iterable[tuple[int, float]], max_workers: int) -> tuple[float, ...]:
    """A non-decreasing curve at 1..max_workers from reports (the first one seen at each
    size wins; give the latest first); () when there is none within range."""
    by_size: dict[int, float] = {}
    for workers, rate in reports:
        if 1 <= workers <= max_workers:
            by_size.setdefault(workers, rate)
    if not by_size:
        return ()
    smallest = min(by_size)
    curve: list[float] = []
    for workers in range(1, max(by_size) + 1):
        if workers < smallest:
            value = by_size[smallest] * workers / smallest
        else:
            value = max(by_size.get(workers, 0.0), curve[-1] if curve else 0.0)
        curve.append(value)
    return tuple(curve)


def learned_curve(
    owner: User, vc: VirtualCluster, name: str, max_workers: int
) -> tuple[float, ...]:
    """The curve of a job about to be submitted, from the reports of the owner's earlier
    jobs of that name in the VC (an array's tasks share its name), latest first."""
    earlier = Job.objects.filter(owner=owner, vc=vc, name=name).exclude(started_at=None)
    rows = earlier.order_by("-started_at")[:EARLIER_RUNS]
    reports = [
        report
        for job_id, workers in rows.values_list("job_id", "workers")
        if (report := last_report(_log_tail(job_id), workers))
    ]
    return curve_from_reports(reports, max_workers)


def _log_tail(job_id: str) -> bytes:
    files = job_log_files(job_id)
    if not files:
        return b""
    try:
        with open_job_file(str(files[0])) as log:
            size = os.fstat(log.fileno()).st_size
            log.seek(max(0, size - TAIL_BYTES))
            return log.read(TAIL_BYTES)
    except OSError:
        return b""
