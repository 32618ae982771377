"""VC-dedicated nodes in the pure core: bound nodes take their VC's jobs, and other VCs'
preemptible jobs only where the VC lends them (jobmanager.core.dedication)."""

from __future__ import annotations

from dataclasses import replace

from jobmanager.core.snapshot import Policy
from jobmanager.core.timeline import estimate_start_times
from tests.jobmanager.core_builders import (
    decide,
    gpus_by_node,
    node,
    preempted,
    queued,
    reasons,
    running,
    snapshot,
    started,
    vc,
)


def test_another_vcs_job_waits_rather_than_run_on_a_dedicated_node():
    cluster = (replace(node("ded", gpus=8), dedicated_to="a"), node("shared", gpus=4))
    jobs = [queued("b-big", "b", gpus=8), queued("b-small", "b", gpus=4, at=1)]
    decisions = decide(cluster, [vc("a", 8), vc("b", 8, Policy.RF)], queued_jobs=jobs)
    assert started(decisions) == ["b-small"]
    assert gpus_by_node(decisions, "b-small") == {"shared": 4}
    assert reasons(decisions)["b-big"] == (
        "needs 8 A100; largest free block is 4 on the nodes it may use "
        "(others are dedicated to other VCs)"
    )


def test_the_vcs_own_jobs_run_on_its_dedicated_node():
    cluster = (replace(node("ded", gpus=8), dedicated_to="a"), node("shared", gpus=4))
    decisions = decide(cluster, [vc("a", 8)], queued_jobs=[queued("a-big", "a", gpus=8)])
    assert gpus_by_node(decisions, "a-big") == {"ded": 8}


def test_the_reason_names_dedicated_nodes_when_only_they_are_left():
    cluster = (replace(node("ded", gpus=8), dedicated_to="a"),)
    decisions = decide(cluster, [vc("a", 8), vc("b", 8)], queued_jobs=[queued("j", "b")])
    assert reasons(decisions)["j"] == (
        "every schedulable A100 node it may use is dedicated to another VC"
    )


def test_a_lending_vc_takes_other_vcs_preemptible_jobs_and_preempts_them_to_get_it_back():
    cluster = (replace(node("ded", gpus=4), dedicated_to="a"),)
    vcs = [replace(vc("a", 4), lends_dedicated=True), vc("b", 4)]
    guest = queued("guest", "b", gpus=4, preemptible=True)
    assert started(decide(cluster, vcs, queued_jobs=[guest])) == ["guest"]
    # Not lent, or not preemptible: it waits.
    closed = [vc("a", 4), vc("b", 4)]
    assert started(decide(cluster, closed, queued_jobs=[guest])) == []
    assert started(decide(cluster, vcs, queued_jobs=[replace(guest, preemptible=False)])) == []
    # The VC's own guaranteed work takes its node back.
    borrowed = running("guest", "b", ("ded", (0, 1, 2, 3)), preemptible=True)
    decisions = decide(cluster, vcs, [borrowed], [queued("own", "a", gpus=4, at=50)])
    assert preempted(decisions) == {"guest"}


def test_start_time_estimates_place_jobs_only_where_their_vc_may_run():
    cluster = (replace(node("ded", gpus=8), dedicated_to="a"), node("shared", gpus=8))
    busy = [running("long", "a", ("shared", tuple(range(8))), deadline=1000.0)]
    jobs = [queued("b-job", "b", gpus=8), queued("a-job", "a", gpus=8, at=1)]
    waiting = snapshot(cluster, [vc("a", 16), vc("b", 8)], busy, jobs)

    estimates = estimate_start_times(waiting, default_run_time=3600.0)

    # a's job at once on its idle dedicated node; b's when the shared node frees up.
    assert estimates == {"a-job": 100.0, "b-job": 1000.0}


def test_a_fifo_head_that_only_another_vcs_nodes_could_hold_does_not_block_its_queue():
    cluster = (replace(node("ded", gpus=8), dedicated_to="a"), node("shared", gpus=4))
    jobs = [queued("b-big", "b", gpus=8), queued("b-small", "b", gpus=2, at=1)]
    decisions = decide(cluster, [vc("a", 8), vc("b", 12, Policy.FIFO)], queued_jobs=jobs)

    assert started(decisions) == ["b-small"]
