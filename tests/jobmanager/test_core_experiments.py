"""Backfill variants measured on the ITP traces (off by default): largest fit first, and
ranking submission bursts by the service their started jobs have shown."""

from __future__ import annotations

from dataclasses import replace

from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import Policy
from jobmanager.simulate.bursts import BurstService
from tests.jobmanager.core_builders import nodes, queued, snapshot, started, vc


def test_largest_fit_first_starts_the_gang_that_fits_before_an_earlier_small_job():
    small = queued("small", gpus=1, at=1.0)
    gang = queued("gang", gpus=4, at=2.0)
    plain = snapshot(nodes(1), [vc("a", 4, Policy.BACKFILL)], queued_jobs=[small, gang])

    assert started(schedule(plain)) == ["small"]
    assert started(schedule(replace(plain, largest_fit_first=True))) == ["gang"]


def test_bursts_go_by_the_service_their_started_jobs_have_shown_until_the_guard():
    long_sweep = queued("long", gpus=4, at=1.0, burst="b1")
    short_sweep = queued("short", gpus=4, at=2.0, burst="b2")
    plain = snapshot(nodes(1), [vc("a", 4, Policy.BACKFILL)], queued_jobs=[long_sweep, short_sweep])
    shown = replace(plain, burst_service={"b1": 36_000.0, "b2": 60.0}, burst_guard=3600.0)

    assert started(schedule(plain)) == ["long"]  # off: queue order
    assert started(schedule(shown)) == ["short"]
    assert started(schedule(replace(shown, now=3601.5))) == ["long"]  # waited past the guard


def test_a_burst_is_the_jobs_of_a_kind_minutes_apart_and_shows_what_its_jobs_ran():
    bursts = BurstService(window=600.0)
    first = bursts.join("a", "mia", 1, submitted=0.0)
    assert bursts.join("a", "mia", 1, submitted=500.0) == first
    assert bursts.join("a", "mia", 2, submitted=500.0) != first  # another size
    assert bursts.join("a", "mia", 1, submitted=1200.0) != first  # 700 s after the last
    assert bursts.get(first) == 0.0  # nothing started yet

    bursts.started(first, "j1", now=100.0)
    bursts.started(first, "j2", now=100.0)
    bursts.stopped(first, "j1", now=400.0, ended=True)  # ran 300 s
    bursts.now = 1100.0  # j2 has run 1000 s so far
    assert bursts.get(first) == 650.0
