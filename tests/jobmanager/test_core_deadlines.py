"""Deadlines that scale (jobmanager.core.deadlines): curves, the minimum satisfactory share
and the admission answer, by example and as properties (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobmanager.core.deadlines import (
    admit,
    curve_errors,
    growth_steps,
    rate,
    satisfactory_share,
)
from jobmanager.core.elastic import schedule_elastic
from jobmanager.core.snapshot import Elastic, Policy
from tests.jobmanager.core_builders import nodes, queued, running, snapshot, vc

LINEAR = (100.0, 200.0, 300.0, 400.0)
SUBLINEAR = (100.0, 180.0, 240.0, 270.0)


def deadline_job(job_id: str = "due", due: float = 1100.0, low: int = 1, high: int = 4, **kw):
    return queued(job_id, "a", due=due, elastic=Elastic(low, high, 300.0, **kw))


def test_a_curve_is_positive_non_decreasing_and_no_longer_than_max_workers():
    assert curve_errors(LINEAR, 4) == []
    assert curve_errors((), 4) == ["Give at least one value: the throughput at 1 worker."]
    assert "max_workers" in curve_errors(LINEAR, 3)[0]
    assert "positive" in curve_errors((100.0, 0.0), 4)[0]
    assert "positive" in curve_errors((100.0, math.nan), 4)[0]
    assert "decrease" in curve_errors((200.0, 100.0), 4)[0]


def test_the_satisfactory_share_is_the_fewest_workers_that_finish_in_time():
    # 100 000 samples in 1000 s: 100 samples/s are needed, at 1 worker of LINEAR.
    assert satisfactory_share(LINEAR, 100_000, 0, 1000, 1, 4) == 1
    assert satisfactory_share(LINEAR, 250_000, 0, 1000, 1, 4) == 3
    assert satisfactory_share(SUBLINEAR, 250_000, 0, 1000, 1, 4) == 4
    assert satisfactory_share(SUBLINEAR, 300_000, 0, 1000, 1, 4) is None
    assert satisfactory_share(LINEAR, 100_000, 0, 1000, 2, 4) == 2  # never below its minimum


def test_on_an_idle_cluster_the_job_meets_its_deadline_with_its_share():
    job = deadline_job(due=1100.0)
    answer = admit(snapshot(nodes(1), [vc("a", 4)], now=100.0), job, LINEAR, 250_000)
    assert answer.feasible and answer.share == 3
    assert answer.earliest_finish == 100.0 + 250_000 / 400.0  # all four GPUs from now


def test_a_busy_cluster_pushes_the_earliest_finish_past_the_deadline():
    # Three of the four GPUs are held until 900 s: one worker until then, four after.
    busy = running("busy", "b", ("n00", (0, 1, 2)), expected_end=900.0)
    cluster = snapshot(nodes(1), [vc("a", 4), vc("b", 0)], [busy], now=100.0)
    answer = admit(cluster, deadline_job(due=1100.0), LINEAR, 250_000)
    # 800 s at 100/s = 80 000, then 170 000 at 400/s = 425 s: done at 1325 s.
    assert not answer.feasible and answer.share == 3
    assert answer.earliest_finish == 1325.0


def test_a_job_cannot_start_below_its_minimum():
    busy = running("busy", "b", ("n00", (0, 1, 2)), expected_end=900.0)
    cluster = snapshot(nodes(1), [vc("a", 4), vc("b", 0)], [busy], now=100.0)
    answer = admit(cluster, deadline_job(due=5000.0, low=2), LINEAR, 40_000)
    assert answer.earliest_finish == 900.0 + 40_000 / 400.0


def test_a_job_that_never_fits_never_finishes():
    answer = admit(snapshot(nodes(1, gpus=1), [vc("a", 1)]), deadline_job(low=2), LINEAR, 10)
    assert answer == answer.__class__(False, 2, math.inf)


def test_deadline_jobs_due_earlier_hold_their_shares_first():
    earlier = deadline_job("earlier", due=600.0, throughput=LINEAR, work=150_000.0)
    job = deadline_job(due=1100.0)
    cluster = snapshot(nodes(1), [vc("a", 4)], queued_jobs=[earlier, job], now=100.0)
    # earlier needs 300/s for 500 s: three workers; one is left for this job.
    answer = admit(cluster, job, LINEAR, 100_000)
    assert answer.earliest_finish == 100.0 + 100_000 / 100.0
    later = deadline_job("later", due=5000.0, throughput=LINEAR, work=1e9)
    cluster = snapshot(nodes(1), [vc("a", 4)], queued_jobs=[later, job], now=100.0)
    assert admit(cluster, job, LINEAR, 100_000).earliest_finish == 100.0 + 100_000 / 400.0


curves = st.lists(st.floats(1.0, 1000.0), min_size=1, max_size=6).map(
    lambda values: tuple(sorted(values))
)


@settings(max_examples=200, deadline=None)
@given(
    curve=curves,
    work=st.floats(1.0, 1e6),
    due_in=st.floats(1.0, 1e5),
    held=st.lists(st.tuples(st.integers(0, 3), st.floats(1.0, 1e4)), max_size=4),
)
def test_admission_is_consistent_with_the_curve_and_the_cluster(curve, work, due_in, held):
    high = len(curve)
    busy = [
        running(f"r{index}", "b", ("n00", (gpu,)), expected_end=100.0 + end)
        for index, (gpu, end) in enumerate(dict(held).items())
    ]
    cluster = snapshot(nodes(2), [vc("a", 8), vc("b", 0)], busy, now=100.0)
    job = deadline_job(due=100.0 + due_in, high=high)
    answer = admit(cluster, job, curve, work)
    fastest = 100.0 + work / rate(curve, high)
    assert answer.earliest_finish >= fastest * (1 - 1e-9)
    assert answer.feasible == (answer.earliest_finish <= job.due)
    if answer.feasible:  # it meets it with a constant share at the most
        assert answer.share is not None
    if answer.share is not None:  # the fewest workers that finish in time from now
        assert 100.0 + work / rate(curve, answer.share) <= job.due
        if answer.share > 1:
            assert 100.0 + work / rate(curve, answer.share - 1) > job.due
    if not busy and high <= 8:  # an idle cluster: every worker from now
        assert answer.earliest_finish == fastest


# --- growing by the curves (jobmanager.core.elastic) -----------------------------------


def started_sizes(decisions) -> dict[str, int]:
    found = {start.job_id: len(start.placement) for start in decisions.starts}
    found.update({resize.job_id: resize.workers_to for resize in decisions.resizes})
    return found


def test_a_deadline_job_gets_its_satisfactory_share_before_others_grow():
    # 4 idle GPUs. "due" needs 250 000 samples by 1100 s: three workers of LINEAR. "other"
    # has no deadline: round robin would give each two.
    due = deadline_job("due", due=1100.0, throughput=LINEAR, work=250_000.0)
    other = queued("other", "a", at=-1.0, elastic=Elastic(1, 4, 300.0))
    decisions = schedule_elastic(snapshot(nodes(1), [vc("a", 4)], [], [other, due], now=100.0))
    assert started_sizes(decisions) == {"due": 3, "other": 1}


def test_a_deadline_job_starts_with_its_share_rather_than_its_minimum():
    # Three GPUs free, a backfill VC (earliest deadline first). Started at their minimum,
    # "due" and "other" (queued first) would take one each and "due" could grow to two
    # only; judged at its share of three, "due" starts with it and "other" waits.
    busy = running("busy", "a", ("n00", (0,)))
    due = deadline_job("due", due=1100.0, throughput=LINEAR, work=250_000.0)
    other = queued("other", "a", at=-1.0, elastic=Elastic(1, 4, 300.0))
    backfill = vc("a", 4, policy=Policy.BACKFILL)
    cluster = snapshot(nodes(1), [backfill], [busy], [other, due], now=100.0)
    assert started_sizes(schedule_elastic(cluster)) == {"due": 3}


def test_idle_gpus_go_where_they_shorten_jobs_most():
    # Both at their minimum of one; "flat" gains nothing from a second worker, "scales"
    # gains from each: it takes both idle GPUs, and "flat" is not grown at all.
    flat = running("flat", "a", ("n00", (0,)), elastic=Elastic(1, 4, 300.0, (100.0,), 1e5))
    scales = running("scales", "a", ("n01", (0,)), elastic=Elastic(1, 4, 300.0, SUBLINEAR, 1e5))
    cluster = snapshot(nodes(2, gpus=2), [vc("a", 4)], [flat, scales], now=1000.0)
    assert started_sizes(schedule_elastic(cluster)) == {"scales": 3}


def test_the_next_worker_goes_to_the_job_it_saves_most_time():
    # "big" has 5x the work of "small" on the same curve, three GPUs are idle. Seconds
    # saved by the next worker: big 4444, then 1389, then 463; small 889, then 278. So
    # big takes two and small one; a fourth idle GPU goes to big (463 s over 278 s),
    # where round robin would give each job two.
    big = running("big", "a", ("n00", (0,)), elastic=Elastic(1, 4, 300.0, SUBLINEAR, 1e6))
    small = running("small", "a", ("n00", (1,)), elastic=Elastic(1, 4, 300.0, SUBLINEAR, 2e5))
    cluster = snapshot(nodes(1, gpus=5), [vc("a", 8)], [big, small], now=1000.0)
    assert started_sizes(schedule_elastic(cluster)) == {"big": 3, "small": 2}
    cluster = snapshot(nodes(1, gpus=6), [vc("a", 8)], [big, small], now=1000.0)
    assert started_sizes(schedule_elastic(cluster)) == {"big": 4, "small": 2}


# Profiled at powers of two, as ElasticFlow's throughput tables are: 3 workers run at
# 2's rate, 5 to 7 at 4's.
POWERS_OF_TWO = (100.0, 190.0, 190.0, 350.0, 350.0, 350.0, 350.0, 600.0)


def test_a_flat_part_of_a_curve_is_crossed_in_one_step():
    # From 2 workers, 3 adds nothing: the steps are to 4 (+2) and to 8 (+6). Seconds saved
    # per added worker: 2 -> 4: (1e5/190 - 1e5/350) / 2 = 120; 2 -> 8: (526 - 167) / 6 = 60.
    steps = growth_steps(POWERS_OF_TWO, 1e5, 2, 8)
    assert [added for _, added in steps] == [2, 6]
    assert steps[0][0] == pytest.approx((1e5 / 190 - 1e5 / 350) / 2)
    assert growth_steps(POWERS_OF_TWO, 1e5, 8, 8) == []
    assert growth_steps(POWERS_OF_TWO, 0.0, 2, 8) == []


def test_a_job_on_a_stepped_curve_grows_to_its_next_faster_size():
    # Two idle GPUs beside a 2-worker job whose curve is flat at 3: one worker at a time,
    # it would never grow; it takes both as one step, to 4 workers.
    stepped = Elastic(1, 8, 300.0, POWERS_OF_TWO, 1e6)
    job = running("stepped", "a", ("n00", (0,)), ("n00", (1,)), elastic=stepped)
    cluster = snapshot(nodes(1, gpus=4), [vc("a", 8)], [job], now=1000.0)
    assert started_sizes(schedule_elastic(cluster)) == {"stepped": 4}
    # One idle GPU: no faster size fits, so it is not grown by a worker that adds nothing.
    cluster = snapshot(nodes(1, gpus=3), [vc("a", 8)], [job], now=1000.0)
    assert started_sizes(schedule_elastic(cluster)) == {}


@settings(max_examples=150, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(
            st.integers(1, 3),  # min workers
            st.integers(0, 3),  # max above min
            curves,
            st.floats(1.0, 1e6),  # work left
            st.one_of(st.none(), st.floats(1.0, 1e4)),  # due, seconds from now
        ),
        min_size=1,
        max_size=5,
    )
)
def test_growing_by_the_curves_keeps_sizes_in_range_and_never_overcommits(jobs):
    cluster = nodes(2, gpus=4)
    waiting = [
        queued(
            f"j{index}", "a", at=float(index), due=None if due is None else 1000.0 + due,
            elastic=Elastic(low, low + extra, 300.0, curve, work),
        )
        for index, (low, extra, curve, work, due) in enumerate(jobs)
    ]  # fmt: skip
    decisions = schedule_elastic(snapshot(cluster, [vc("a", 8)], [], waiting, now=1000.0))
    by_id = {job.id: job for job in waiting}
    taken = [(w.node, gpu) for s in decisions.starts for w in s.placement for gpu in w.gpus]
    assert len(taken) == len(set(taken)) <= 8
    for start in decisions.starts:
        elastic = by_id[start.job_id].elastic
        assert elastic.min_workers <= len(start.placement) <= elastic.max_workers
