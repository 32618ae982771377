"""The relaxed replay behind bench.simulator.relaxed_bounds: FIFO holds the line, SRPT
preempts for the shortest remaining work, the Gittins index is what it is for known
distributions, and a wait limit puts a job queued that long first."""

from __future__ import annotations

import numpy as np
import pytest

from bench.simulator.relaxed_bounds import Figures, Jobs, gittins, gittins_indices, replay

STEP = 600.0


def two_jobs() -> Jobs:
    """One GPU; a 10,000 s job at 0, then a 600 s job at 600."""
    return Jobs(np.array([0.0, 600.0]), np.array([10_000.0, 600.0]), np.array([1, 1]))


def test_fifo_makes_the_short_job_wait_for_the_long_one():
    jobs = two_jobs()

    outcome = replay(jobs, 1, STEP, None)

    assert outcome.ended[0] == pytest.approx(10_000.0)
    assert outcome.first_start[1] >= 10_000.0
    figures = Figures.of(jobs, outcome)
    assert figures.longest_wait == pytest.approx(outcome.first_start[1] - 600.0)
    assert figures.mean_queued == pytest.approx(figures.mean_wait)  # nothing preempted


def test_srpt_preempts_the_long_job_and_counts_its_second_wait():
    jobs = two_jobs()

    def srpt(ids: np.ndarray, attained: np.ndarray, now: float) -> np.ndarray:
        return (jobs.duration[ids] - attained) * jobs.gpus[ids]

    outcome = replay(jobs, 1, STEP, srpt)

    assert outcome.first_start[1] == pytest.approx(600.0)
    assert outcome.ended[1] == pytest.approx(1200.0)
    assert outcome.ended[0] == pytest.approx(10_600.0)
    figures = Figures.of(jobs, outcome)
    assert figures.longest_wait == 0.0  # both started at once...
    assert figures.longest_queued == pytest.approx(600.0)  # ...but the long one waited again


def test_the_gittins_index_of_a_known_duration_is_one_over_what_is_left():
    indices = gittins_indices(np.array([1800.0] * 30), STEP)

    assert indices[0] == pytest.approx(1 / 1800.0)
    assert indices[1] == pytest.approx(1 / 1200.0)  # closer to its end: more urgent


def test_a_wait_limit_puts_a_job_queued_that_long_before_a_higher_index():
    """Of 1-GPU jobs half of which run 600 s and half 20,000 s: a job that has run 3,000 s
    (so a long one) ranks after a fresh one, unless it has waited past the limit."""
    jobs = Jobs(
        np.array([0.0] * 40 + [0.0, 9000.0]),
        np.array([600.0] * 20 + [20_000.0] * 20 + [20_000.0, 600.0]),
        np.ones(42, dtype=int),
    )
    ids = np.array([40, 41])
    attained = np.array([3000.0, 0.0])  # at 10,000 the first has waited 7,000 s in all

    plain = gittins(jobs, STEP, None)(ids, attained, 10_000.0)
    limited = gittins(jobs, STEP, 5000.0)(ids, attained, 10_000.0)

    assert plain[1] < plain[0]
    assert limited[0] < limited[1]
