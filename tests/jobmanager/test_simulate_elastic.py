"""The replay of elastic jobs with scaling curves, resize costs and deadlines."""

from __future__ import annotations

import pytest

from jobmanager.simulate.cluster import ClusterSpec
from jobmanager.simulate.elastic import ElasticOptions, ElasticTraceJob, replay_elastic

ONE_NODE = ClusterSpec(nodes=1, gpus_per_node=4)
LINEAR = (1.0, 2.0, 3.0, 4.0)  # work per second at 1..4 workers


def job(job_id: str, at: float, work: float, workers: int, **fields) -> ElasticTraceJob:
    return ElasticTraceJob(job_id, "a", at, work, LINEAR, workers, **fields)


def test_an_elastic_job_starts_on_the_gpus_that_are_free_and_grows_when_more_are():
    jobs = [
        job("fixed", 0.0, 200.0, 2, min_workers=2, max_workers=2),  # 100 s on 2 GPUs
        job("elastic", 10.0, 1000.0, 4, min_workers=2),
    ]
    options = ElasticOptions(interval=60.0, min_resize_interval=60.0)

    run = replay_elastic(jobs, ONE_NODE, {"a": 4}, options)

    assert run.sizes["elastic"] == [(10.0, 2), (100.0, 4)]
    assert run.resizes == [0, 1]
    # 90 s at 2 GPUs (180 of its work), the other 820 at 4 GPUs: 205 s more.
    assert run.ended[1] == pytest.approx(305.0)


def test_a_resize_costs_its_restart_and_a_fixed_run_never_resizes():
    jobs = [
        job("fixed", 0.0, 200.0, 2, min_workers=2, max_workers=2),
        job("elastic", 10.0, 1000.0, 4, min_workers=2),
    ]
    costly = ElasticOptions(min_resize_interval=60.0, resize_cost=lambda workers: 20.0)

    elastic = replay_elastic(jobs, ONE_NODE, {"a": 4}, costly)
    fixed = replay_elastic(jobs, ONE_NODE, {"a": 4}, ElasticOptions(elastic=False))

    assert elastic.ended[1] == pytest.approx(325.0)
    assert fixed.resizes == [0, 0]
    assert fixed.first_start[1] == 100.0  # it waits for all 4 of its GPUs
    assert fixed.ended[1] == pytest.approx(350.0)


def test_elastic_jobs_meet_deadlines_that_fixed_sizes_miss():
    # Scaling that flattens: two jobs of 400 units due at 300 s. Fixed at 4 GPUs each
    # (2 units/s) the second starts at 200 s and ends at 400 s; elastic, they share the
    # node at 2 GPUs each (1.5 units/s) and both end at 267 s.
    curve = (1.0, 1.5, 1.8, 2.0)
    jobs = [
        ElasticTraceJob(name, "a", 0.0, 400.0, curve, 4, min_workers=1, deadline=300.0)
        for name in ("first", "second")
    ]

    elastic = replay_elastic(jobs, ONE_NODE, {"a": 4}, ElasticOptions(min_resize_interval=60.0))
    fixed = replay_elastic(jobs, ONE_NODE, {"a": 4}, ElasticOptions(elastic=False))

    assert fixed.ended == [200.0, 400.0]
    assert fixed.met_deadlines() == 0.5
    assert elastic.sizes == {"first": [(0.0, 2)], "second": [(0.0, 2)]}
    assert elastic.ended == pytest.approx([400 / 1.5, 400 / 1.5])
    assert elastic.met_deadlines() == 1.0


def test_a_vcs_own_job_takes_its_quota_back_from_another_vcs_elastic_workers():
    # VC b's elastic job grows over VC a's idle quota; VC a's job arrives at 100 s and
    # starts at once on the workers b gives back, with nothing preempted.
    jobs = [
        ElasticTraceJob("b-elastic", "b", 0.0, 4000.0, LINEAR, 4, min_workers=1),
        ElasticTraceJob("a-fixed", "a", 100.0, 300.0, LINEAR, 3, min_workers=3, max_workers=3),
    ]
    options = ElasticOptions(min_resize_interval=60.0)

    run = replay_elastic(jobs, ONE_NODE, {"a": 3, "b": 1}, options)

    assert run.preemptions == 0
    assert run.first_start == [0.0, 100.0]
    assert run.sizes["b-elastic"][:2] == [(0.0, 4), (100.0, 1)]
    assert run.ended[1] == pytest.approx(200.0)


def test_with_curves_a_deadline_job_gets_its_satisfactory_share_and_meets_it():
    # Both start at once on a 4-GPU node. "due" needs 300 units by 110 s: three workers
    # (100 s). Round robin gives each two (150 s: missed); with the curves the core gives
    # "due" its share of three first and "other" the one left.
    jobs = [
        ElasticTraceJob("due", "a", 0.0, 300.0, LINEAR, 4, min_workers=1, deadline=110.0),
        ElasticTraceJob("other", "a", 0.0, 1000.0, LINEAR, 4, min_workers=1),
    ]
    blind = replay_elastic(jobs, ONE_NODE, {"a": 4}, ElasticOptions(min_resize_interval=60.0))
    seeing = replay_elastic(
        jobs, ONE_NODE, {"a": 4}, ElasticOptions(min_resize_interval=60.0, curves=True)
    )

    assert blind.sizes["due"][0] == (0.0, 2) and blind.met_deadlines() == 0.0
    assert seeing.sizes["due"][0] == (0.0, 3) and seeing.sizes["other"][0] == (0.0, 1)
    assert seeing.ended[0] == pytest.approx(100.0)
    assert seeing.met_deadlines() == 1.0


def test_with_admission_a_deadline_out_of_reach_at_arrival_runs_best_effort():
    # "busy" holds the node until 100 s. "hopeless" needs 250 s on all four GPUs by 150 s;
    # "fine" needs 100 s by 300 s: only "hopeless" is admitted without its deadline, and
    # both count against their deadlines as before.
    jobs = [
        ElasticTraceJob("busy", "a", 0.0, 400.0, LINEAR, 4, min_workers=4),
        ElasticTraceJob("hopeless", "a", 1.0, 1000.0, LINEAR, 4, min_workers=1, deadline=150.0),
        ElasticTraceJob("fine", "a", 2.0, 400.0, LINEAR, 4, min_workers=1, deadline=300.0),
    ]
    options = ElasticOptions(min_resize_interval=60.0, curves=True, admission=True)

    run = replay_elastic(jobs, ONE_NODE, {"a": 4}, options)

    assert run.best_effort == ["hopeless"]
    assert run.met_deadlines() == 0.5
