"""The scheduling core's shortcuts decide exactly what the plain reading would (hypothesis).

Each shortcut is compared with the straightforward way on random snapshots: the decisions
(starts, preemptions, places kept, reservations, reasons) must be equal.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from jobmanager.core.dedication import snapshot_with_pools
from jobmanager.core.queues import QueueBook
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import Snapshot
from tests.jobmanager.test_core_properties import EXAMPLES, snapshots


def _book(snapshot: Snapshot) -> QueueBook:
    return QueueBook.of(snapshot.queued, snapshot.vcs, snapshot.las_thresholds)


@EXAMPLES
@given(snapshots(), st.booleans(), st.booleans())
def test_phase_one_stopping_after_the_last_job_not_preemptible_decides_as_reading_all(
    snapshot, explain, all_preemptible
):
    """Phase one starts only jobs that are not preemptible, so it stops once it has read
    the last of them; reading on through every preemptible job (as it did) decides the
    same, with reasons given or not, and with every job preemptible."""
    if all_preemptible:
        queued = tuple(replace(job, preemptible=True) for job in snapshot.queued)
        snapshot = replace(snapshot, queued=queued)
    snapshot = snapshot_with_pools(replace(snapshot, explain=explain))
    reading_all = _book(snapshot)
    # More jobs not preemptible than there are: phase one never stops early.
    reading_all.unpreemptible = defaultdict(lambda: len(snapshot.queued) + 1)

    decided = schedule(snapshot, book=_book(snapshot))

    assert decided == schedule(snapshot, book=reading_all)
    assert decided == schedule(snapshot)
