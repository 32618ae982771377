"""Whole nodes for distributed jobs and network topology in the pure core
(jobmanager.core.topology)."""

from __future__ import annotations

from dataclasses import replace

from jobmanager.core.snapshot import Policy
from tests.jobmanager.core_builders import (
    decide,
    gpus_by_node,
    node,
    preempted,
    queued,
    reasons,
    running,
    started,
    vc,
)


def switched(name: str, switch: str, gpus: int = 4):
    return replace(node(name, gpus=gpus), switch=switch)


def whole(job):
    return replace(job, shape=replace(job.shape, whole_nodes=True))


def one_switch(job):
    return replace(job, shape=replace(job.shape, same_switch=True))


def test_a_whole_node_gang_takes_empty_nodes_only_and_all_of_each():
    cluster = (node("busy"), node("e1"), node("e2"))
    held = running("other", "a", ("busy", (0,)))
    job = whole(queued("gang", gpus=1, workers=2))
    decisions = decide(cluster, [vc("a", 12)], [held], [job])
    assert gpus_by_node(decisions, "gang") == {"e1": 4, "e2": 4}
    cpus = {worker.millicpus for start in decisions.starts for worker in start.placement}
    assert cpus == {64_000}


def test_a_whole_node_gang_waits_saying_so_while_every_node_is_shared():
    cluster = (node("n1"), node("n2"))
    held = running("other", "a", ("n1", (0,)))
    job = whole(queued("gang", gpus=1, workers=2))
    decisions = decide(cluster, [vc("a", 8)], [held], [job])
    assert started(decisions) == []
    assert reasons(decisions)["gang"] == (
        "needs 2 whole A100 nodes (nothing else on them, as it asks for whole nodes); "
        "1 such are free"
    )
    # Without the flag it shares the nodes at once.
    assert started(decide(cluster, [vc("a", 8)], [held], [queued("gang", workers=2)])) == ["gang"]


def test_a_single_worker_job_asking_for_whole_nodes_shares_as_any():
    cluster = (node("n1"),)
    held = running("other", "a", ("n1", (0,)))
    decisions = decide(cluster, [vc("a", 8)], [held], [whole(queued("solo", gpus=2))])
    assert gpus_by_node(decisions, "solo") == {"n1": 2}


def test_nothing_else_goes_onto_a_whole_node_jobs_nodes():
    cluster = (node("n1"), node("n2"))
    gang = running("gang", "a", ("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3)), cpus=64)
    gang = replace(gang, shape=replace(gang.shape, whole_nodes=True))
    decisions = decide(cluster, [vc("a", 8)], [gang], [queued("small")])
    assert started(decisions) == []


def test_a_gang_goes_under_the_switch_with_just_enough_room():
    cluster = (
        switched("a1", "sw-a"),
        switched("a2", "sw-a"),
        switched("a3", "sw-a"),
        switched("b1", "sw-b"),
        switched("b2", "sw-b"),
    )
    decisions = decide(cluster, [vc("a", 20)], queued_jobs=[queued("gang", gpus=4, workers=2)])
    assert gpus_by_node(decisions, "gang") == {"b1": 4, "b2": 4}


def test_a_gang_no_switch_can_hold_is_spread_over_the_fewest():
    cluster = (
        switched("a1", "sw-a"),
        switched("b1", "sw-b"),
        switched("b2", "sw-b"),
        switched("c1", "sw-c"),
        switched("c2", "sw-c"),
    )
    decisions = decide(cluster, [vc("a", 20)], queued_jobs=[queued("gang", gpus=4, workers=4)])
    assert gpus_by_node(decisions, "gang") == {"b1": 4, "b2": 4, "c1": 4, "c2": 4}


def test_a_same_switch_gang_waits_for_one_switch_saying_so():
    cluster = (switched("a1", "sw-a"), switched("a2", "sw-a"), switched("b1", "sw-b"))
    held = running("other", "a", ("a2", (0, 1, 2, 3)))
    job = one_switch(queued("gang", gpus=4, workers=2))
    decisions = decide(cluster, [vc("a", 12)], [held], [job])
    assert started(decisions) == []
    assert reasons(decisions)["gang"] == (
        "needs its 2 workers under one network switch (it asks for the same switch); "
        "the most room under one switch now is for 1"
    )
    # Once the other job is gone, it starts under sw-a.
    decisions = decide(cluster, [vc("a", 12)], queued_jobs=[job])
    assert gpus_by_node(decisions, "gang") == {"a1": 4, "a2": 4}


def test_a_same_switch_gang_preempts_under_one_switch():
    cluster = (switched("a1", "sw-a"), switched("a2", "sw-a"), switched("b1", "sw-b"))
    borrowers = [
        running("x", "b", ("a1", (0, 1, 2, 3)), borrowing=True, started_at=5),
        running("y", "b", ("b1", (0, 1, 2, 3)), borrowing=True, started_at=9),
    ]
    job = one_switch(queued("gang", gpus=4, workers=2))
    decisions = decide(cluster, [vc("a", 8), vc("b", 0, Policy.FIFO)], borrowers, [job])
    # y is the later started (the first victim otherwise), but only x frees sw-a.
    assert preempted(decisions) == {"x"}
