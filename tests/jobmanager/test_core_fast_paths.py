"""The scheduling core's shortcuts decide exactly what the plain reading would (hypothesis).

Each shortcut is compared with the straightforward way on random snapshots: the decisions
(starts, preemptions, places kept, reservations, reasons) must be equal.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from jobmanager.core.dedication import snapshot_with_pools
from jobmanager.core.overdue import is_overdue, overdue_from, was_overdue
from jobmanager.core.pass_state import PassState
from jobmanager.core.queues import QueueBook, Walk, las_level
from jobmanager.core.reservations import RunningEnds, effective_end
from jobmanager.core.running import RunningSummary
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    JobShape,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    WorkerPlacement,
)
from tests.jobmanager.test_core_properties import EXAMPLES, NOW, snapshots


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


class _FreshWalk(Walk):
    """A walk that ranks every stream's head afresh, never from an earlier walk's heap."""

    def __init__(self, *args, first=None, **kwargs):
        super().__init__(*args, **kwargs)


@EXAMPLES
@given(snapshots(), st.booleans())
def test_what_a_pass_works_out_once_decides_as_working_it_out_each_time(snapshot, explain):
    """A pass works out once whether a job is overdue, a running job's LAS queue and
    whether it was overdue, picks each VC's ranking once, and starts later walks of a
    VC's streams from the first walk's heap (under fair share and LAS too, though usage
    grows with each start): it decides as working each out again every time."""
    snapshot = replace(snapshot, explain=explain)
    decided = schedule(snapshot)
    with (
        patch("jobmanager.core.scheduler.Walk", _FreshWalk),
        patch.object(
            PassState, "is_overdue", lambda state, job, vc: is_overdue(state.snapshot, job, vc)
        ),
        patch.object(
            PassState,
            "was_overdue",
            lambda state, running, vc: was_overdue(state.snapshot, running, vc),
        ),
        patch.object(
            PassState,
            "running_level",
            lambda state, running: las_level(
                running.attained_at(state.snapshot.now), state.snapshot.las_thresholds
            ),
        ),
    ):
        afresh = schedule(snapshot)
    assert decided == afresh


_limits = st.sampled_from([None, 0.0, 30.0, 100.0, 150.0])


@EXAMPLES
@given(snapshots(), st.data(), st.booleans())
def test_what_is_kept_between_passes_decides_as_a_fresh_book_and_summary(snapshot, data, explain):
    """The queue book and running summary kept from pass to pass (by a simulation) hold
    when each queued job becomes overdue and whether each running job was overdue when it
    started: later passes, the clock moved on and the wait limits maybe changed, decide as
    a book and summary built afresh for each."""
    queued = tuple(
        replace(
            job,
            attained=data.draw(st.sampled_from([0.0, 0.0, 50.0, 333.3])),
            expected_wait=data.draw(st.sampled_from([None, 20.0, 90.0])),
        )
        for job in snapshot.queued
    )
    snapshot = snapshot_with_pools(
        replace(
            snapshot,
            queued=queued,
            explain=explain,
            las_wait_limit=data.draw(_limits),
            las_wait_factor=data.draw(st.sampled_from([None, 2.0])),
            las_limit_preempted_only=data.draw(st.booleans()),
        )
    )
    book = _book(snapshot)
    summary = RunningSummary.of(snapshot.running)
    later = snapshot
    for _ in range(data.draw(st.integers(1, 4))):
        assert schedule(later, book=book, summary=summary) == schedule(later)
        later = replace(
            later,
            now=later.now + data.draw(st.sampled_from([0.1, 10.0, 45.0, 200.0])),
            las_wait_limit=data.draw(st.sampled_from([later.las_wait_limit, 60.0])),
        )


_seconds = st.floats(0.0, 1e7, allow_nan=False) | st.integers(0, 10**6).map(float)


@EXAMPLES
@given(_seconds, _seconds, st.integers(0, 64), _seconds | st.none(), st.data())
def test_when_a_job_becomes_overdue_is_the_first_instant_it_is(
    queued_at, attained, gpus, limit, data
):
    """``overdue_from`` gives the first clock reading at which ``is_overdue`` holds, to
    the last bit: just before it the job is not overdue, from it on it is."""
    job = QueuedJob(
        id="q",
        vc="vc",
        shape=JobShape("a100", 1, Resources(gpus=gpus)),
        queued_at=queued_at,
        attained=attained,
    )
    snapshot = Snapshot(now=NOW, nodes=(), vcs=(), running=(), queued=(), las_wait_limit=limit)
    at = overdue_from(snapshot, job)
    assert at is not None
    nows = [at, math.nextafter(at, -math.inf), math.nextafter(at, math.inf)]
    nows += [data.draw(_seconds) for _ in range(3)]
    for now in nows:
        if math.isfinite(now):
            assert (now >= at) == is_overdue(replace(snapshot, now=now), job)


# Times on a coarse grid, so that ends tie (broken by running order) and jobs reach their
# expected ends exactly at ``now``.
_times = st.integers(0, 40).map(lambda tenth: tenth * 600.0)


@st.composite
def _running_job(draw, number: int) -> RunningJob:
    started_at = draw(_times)
    return RunningJob(
        id=f"job-{number}",
        vc="vc",
        shape=JobShape("a100", 1, Resources(gpus=1)),
        placement=(WorkerPlacement(f"node-{number}", (0,), 0, 0),),
        started_at=started_at,
        releasing=draw(st.booleans()) and draw(st.booleans()),
        expected_end=draw(st.none() | _times.map(lambda time: started_at + time)),
        deadline=draw(st.none() | _times.map(lambda time: started_at + time)),
    )


@EXAMPLES
@given(st.data(), _times, st.integers(1, 12))
def test_running_jobs_kept_in_order_of_end_give_each_ones_effective_end_in_order(data, now, jobs):
    """RunningEnds, kept up to date as jobs start and stop (a stopped job that starts
    again comes last, as in a snapshot's running jobs), gives at any time what sorting
    every running job's effective end would, ties in running order, less the jobs a pass
    preempted."""
    kept = RunningEnds()
    running: dict[str, RunningJob] = {}
    for number in data.draw(st.lists(st.integers(0, jobs - 1), max_size=30)):
        job_id = f"job-{number}"
        if job_id in running:
            kept.remove(running.pop(job_id))
        else:
            running[job_id] = data.draw(_running_job(number))
            kept.add(running[job_id])
    preempted = set(data.draw(st.lists(st.sampled_from(sorted(running)))) if running else [])

    in_order = sorted(
        (effective_end(job, now), index, job.placement)
        for index, job in enumerate(
            job for job in running.values() if not job.releasing and job.id not in preempted
        )
    )

    given_ends = kept.at(now, preempted)
    assert [(end, placement) for end, _, placement in given_ends] == [
        (end, placement) for end, _, placement in in_order
    ]


def test_jobs_past_their_end_whose_ends_come_out_equal_go_in_running_order():
    """Jobs past their expected end are read latest start first (the order of their
    effective ends), but two whose effective ends are equal (a short overrun counts as
    the same 600 s) go in running order, as sorting every end does, before a later one."""
    kept = RunningEnds()
    for number, started_at in enumerate((1000.0, 2000.0, 0.0)):
        kept.add(
            RunningJob(
                id=f"job-{number}",
                vc="vc",
                shape=JobShape("a100", 1, Resources(gpus=1)),
                placement=(WorkerPlacement(f"node-{number}", (0,), 0, 0),),
                started_at=started_at,
                expected_end=started_at + 100.0,
            )
        )

    assert [(end, order) for end, order, _ in kept.in_order(7000.0, set())] == [
        (7600.0, 0),
        (7600.0, 1),
        (7700.0, 2),
    ]
