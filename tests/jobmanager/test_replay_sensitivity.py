"""The jittered traces behind bench.simulator.sensitivity: each submission moved by at
most the jitter, nothing else about a job changed, the same seed the same trace."""

from __future__ import annotations

from bench.simulator.sensitivity import jittered
from jobmanager.simulate.synthetic import SyntheticSpec, generate


def test_a_jittered_trace_moves_submissions_by_at_most_the_jitter_and_nothing_else():
    trace = generate(SyntheticSpec(jobs=300, vcs=2, seed=4, mean_interarrival=600.0))

    moved = jittered(trace, 1.0, seed=1)

    assert jittered(trace, 1.0, seed=0) is trace
    assert moved.jobs == jittered(trace, 1.0, seed=1).jobs  # repeatable
    assert moved.jobs != jittered(trace, 1.0, seed=2).jobs
    by_id = {job.id: job for job in trace.jobs}
    assert sorted(by_id) == sorted(job.id for job in moved.jobs)
    shifts = [job.submitted - by_id[job.id].submitted for job in moved.jobs]
    assert max(abs(shift) for shift in shifts) <= 1.0 and any(shifts)
    assert all(
        (job.vc, job.gpus, job.duration, job.user)
        == (by_id[job.id].vc, by_id[job.id].gpus, by_id[job.id].duration, by_id[job.id].user)
        for job in moved.jobs
    )
    assert [job.submitted for job in moved.jobs] == sorted(job.submitted for job in moved.jobs)
