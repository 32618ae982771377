"""Scenarios for the pure scheduling core, each one something a user of the cluster notices."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import Placement, Policy, Resources, VcState
from jobmanager.core.timeline import SimulatedCluster, estimate_start_times
from tests.jobmanager.core_builders import (
    advance,
    decide,
    gpus_by_node,
    node,
    nodes,
    preempted,
    queued,
    reasons,
    running,
    snapshot,
    started,
    vc,
    without,
)

# --- placement: gangs, packing, node constraints ------------------------------------------


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize(
    ("placement", "big_starts"), [(Placement.PACK, True), (Placement.SPREAD, False)]
)
def test_ffdl_a_pack_keeps_a_whole_node_for_a_4_gpu_job(placement, big_starts, policy):
    """FfDL scenario (a): four 1-GPU jobs on four 4-GPU nodes, then a 4-GPU job."""
    cluster = nodes(4, gpus=4)
    small = [queued(f"small{index}", at=index) for index in range(4)]
    first = snapshot(cluster, [vc("a", 16, policy)], queued_jobs=small, placement=placement)
    decisions = schedule(first)
    assert sorted(started(decisions)) == [job.id for job in small]
    used_nodes = {worker.node for start in decisions.starts for worker in start.placement}
    assert len(used_nodes) == (1 if placement == Placement.PACK else 4)

    second = replace(advance(first, decisions), queued=(queued("big", gpus=4, at=10),))
    decisions = schedule(second)
    assert ("big" in started(decisions)) is big_starts
    if not big_starts:
        # (Under the reserving policies it also says when it is expected to start.)
        assert reasons(decisions)["big"].startswith("needs 4 A100; largest free block is 3")


@pytest.mark.parametrize("policy", list(Policy))
def test_ffdl_b_fifty_two_worker_gangs_on_fifteen_nodes(policy):
    """FfDL scenario (b): 50 jobs of 2 workers x 1 GPU on 15 nodes x 4 GPUs."""
    cluster = nodes(15, gpus=4)
    jobs = [queued(f"job{index:02d}", gpus=1, workers=2, at=index) for index in range(50)]
    decisions = decide(cluster, [vc("a", 100, policy)], queued_jobs=jobs)

    assert len(decisions.starts) == 30
    assert len(decisions.waits) == 20
    assert {wait.job_id for wait in decisions.waits} == {job.id for job in jobs[30:]}
    workers = [worker for start in decisions.starts for worker in start.placement]
    used = [(worker.node, gpu) for worker in workers for gpu in worker.gpus]
    assert len(used) == len(set(used)) == 60  # every GPU busy, none twice
    assert all(len(start.placement) == 2 for start in decisions.starts)  # no partial gang


def test_pack_puts_a_small_job_on_the_fullest_node_that_fits():
    cluster = nodes(3, gpus=4)
    busy = [running("r1", "a", ("n00", (0,))), running("r2", "a", ("n01", (0, 1, 2)))]
    decisions = decide(cluster, [vc("a", 12)], busy, [queued("j", gpus=1)])
    assert gpus_by_node(decisions, "j") == {"n01": 1}
    assert decisions.starts[0].placement[0].gpus == (3,)


def test_whole_node_workers_get_whole_nodes():
    cluster = nodes(3, gpus=8)
    busy = [running("r1", "a", ("n00", (0,)))]
    decisions = decide(cluster, [vc("a", 24)], busy, [queued("dist", gpus=8, workers=2)])
    assert gpus_by_node(decisions, "dist") == {"n01": 8, "n02": 8}
    assert all(worker.gpus == tuple(range(8)) for worker in decisions.starts[0].placement)


def test_a_gang_that_does_not_fit_whole_takes_nothing():
    cluster = nodes(2, gpus=4)
    busy = [running("r1", "a", ("n00", (0, 1)))]
    jobs = [queued("gang", gpus=4, workers=2, at=0), queued("small", gpus=2, at=1)]
    decisions = decide(cluster, [vc("a", 16, Policy.RF)], busy, jobs)
    assert started(decisions) == ["small"]
    assert reasons(decisions)["gang"] == (
        "needs 2 x 4 A100 on separate nodes; largest free block is 4, and only 1 such block is free"
    )


def test_node_selector_picks_labelled_nodes():
    cluster = (node("east", labels={"zone": "east"}), node("west", labels={"zone": "west"}))
    jobs = [queued("w", gpus=2, selector={"zone": "west"}), queued("x", selector={"zone": "x"})]
    decisions = decide(cluster, [vc("a", 8, Policy.RF)], queued_jobs=jobs)
    assert gpus_by_node(decisions, "w") == {"west": 2}
    assert reasons(decisions)["x"] == "no schedulable A100 node has the labels zone=x"


def test_cordoned_nodes_get_nothing():
    cluster = (node("cordoned", schedulable=False), node("open"))
    jobs = [queued("j1", gpus=4, at=0), queued("j2", gpus=1, at=1)]
    decisions = decide(cluster, [vc("a", 8, Policy.RF)], queued_jobs=jobs)
    assert gpus_by_node(decisions, "j1") == {"open": 4}
    assert reasons(decisions)["j2"] == "needs 1 A100; largest free block is 0"


def test_cpu_only_jobs_run_on_cpu_nodes():
    cluster = (node("gpu", gpus=4), node("cpu1", 0, "cpu", cpus=16), node("cpu2", 0, "cpu"))
    quota = VcState("a", {"A100": Resources(4, 10**9, 10**9), "cpu": Resources(0, 10**9, 10**9)})
    jobs = [
        queued("prep", gpus=0, workers=2, gpu_type="cpu", cpus=16, at=0),
        queued("huge", gpus=0, gpu_type="cpu", cpus=100, at=1),
    ]
    decisions = decide(cluster, [quota], queued_jobs=jobs)
    placement = decisions.starts[0].placement
    assert started(decisions) == ["prep"]
    assert sorted(worker.node for worker in placement) == ["cpu1", "cpu2"]
    assert all(worker.gpus == () for worker in placement)
    assert reasons(decisions)["huge"] == (
        "needs 100 CPUs and 1024 MiB on cpu nodes; most free CPUs on one node: 48"
    )
    hungry = queued("hungry", gpus=0, gpu_type="cpu", memory=10**6)
    assert reasons(decide(cluster, [quota], queued_jobs=[hungry]))["hungry"] == (
        "needs 1 CPUs and 1000000 MiB on cpu nodes; most free memory on one node: 524288 MiB"
    )


# --- queue order and policies -------------------------------------------------------------


def _one_big_one_small(policy: Policy, now: float = 100.0, big_quota: int = 8):
    """An 8-GPU node half held by VC b; VC a queues a big job, then a small one."""
    cluster = (node("n", gpus=8),)
    vcs = [vc("a", big_quota, policy), vc("b", 4)]
    busy = [running("b1", "b", ("n", (0, 1, 2, 3)))]
    jobs = [queued("big", gpus=8, at=0), queued("small", gpus=1, at=1)]
    return decide(cluster, vcs, busy, jobs, now=now, starvation_seconds=1000)


def test_fifo_head_blocks_the_jobs_behind_it():
    decisions = _one_big_one_small(Policy.FIFO)
    assert started(decisions) == []
    assert reasons(decisions)["small"].startswith("waits behind job big: first in VC a's queue")


def test_runnable_first_lets_a_small_job_by():
    decisions = _one_big_one_small(Policy.RF)
    assert started(decisions) == ["small"]
    assert reasons(decisions)["big"] == "needs 8 A100; largest free block is 4"


@pytest.mark.parametrize("big_quota", [8, 4], ids=["big-within-quota", "big-beyond-quota"])
def test_runnable_first_stops_letting_jobs_by_past_the_starvation_guard(big_quota):
    decisions = _one_big_one_small(Policy.RF, now=1000.0, big_quota=big_quota)
    assert started(decisions) == []
    assert reasons(decisions)["small"].startswith("waits behind job big")
    assert "starvation guard" in reasons(decisions)["small"]


def test_higher_priority_goes_first():
    jobs = [queued("low", gpus=4, at=0), queued("high", gpus=4, at=5, priority=10)]
    decisions = decide(nodes(1), [vc("a", 4)], queued_jobs=jobs)
    assert started(decisions) == ["high"]


def test_the_largest_gang_goes_first_among_jobs_submitted_at_once():
    jobs = [queued("one", gpus=1, at=7), queued("four", gpus=4, at=7), queued("two", gpus=2, at=7)]
    decisions = decide(nodes(1), [vc("a", 4)], queued_jobs=jobs)
    assert started(decisions) == ["four"]


def test_earlier_submission_goes_first():
    jobs = [queued("later", gpus=4, at=9), queued("earlier", gpus=4, at=3)]
    decisions = decide(nodes(1), [vc("a", 4)], queued_jobs=jobs)
    assert started(decisions) == ["earlier"]


# --- quotas, borrowing and preemption -----------------------------------------------------


def test_beyond_quota_a_job_borrows_idle_gpus_as_preemptible():
    jobs = [queued("mine", gpus=4, at=0), queued("extra", gpus=4, at=1)]
    decisions = decide(nodes(2), [vc("a", 4)], queued_jobs=jobs)
    borrowing = {start.job_id: start.borrowing for start in decisions.starts}
    assert borrowing == {"mine": False, "extra": True}


def test_beyond_quota_with_nothing_idle_says_so():
    busy = [running("b1", "b", ("n00", (0, 1, 2, 3)))]
    decisions = decide(nodes(1), [vc("a", 0), vc("b", 4)], busy, [queued("j", gpus=1)])
    assert reasons(decisions)["j"] == (
        "beyond VC a's A100 quota (0 of 0 GPUs in use) and no idle capacity to borrow: "
        "needs 1 A100; largest free block is 0"
    )


def test_guaranteed_job_preempts_the_lowest_priority_borrower():
    busy = [
        running("old-low", "b", ("n00", (0, 1, 2, 3)), started_at=10, borrowing=True),
        running("new-high", "b", ("n01", (0, 1, 2, 3)), started_at=20, priority=1, borrowing=True),
    ]
    decisions = decide(nodes(2), [vc("a", 8), vc("b", 0)], busy, [queued("mine", gpus=4)])
    assert preempted(decisions) == {"old-low"}
    assert decisions.preemptions[0].for_job == "mine"
    assert reasons(decisions)["mine"] == "starts once 1 preempted job(s) have released their GPUs"


def test_among_equal_priorities_the_most_recently_started_borrower_goes():
    busy = [
        running("older", "b", ("n00", (0, 1, 2, 3)), started_at=10, borrowing=True),
        running("newer", "b", ("n01", (0, 1, 2, 3)), started_at=20, borrowing=True),
    ]
    decisions = decide(nodes(2), [vc("a", 8), vc("b", 0)], busy, [queued("mine", gpus=4)])
    assert preempted(decisions) == {"newer"}


def test_the_fewest_borrowers_are_preempted():
    """Four recent 1-GPU borrowers on one node, one older 4-GPU borrower on another: a
    4-GPU job needs only the one."""
    small = [
        running(f"small{gpu}", "b", ("n00", (gpu,)), started_at=50 + gpu, borrowing=True)
        for gpu in range(4)
    ]
    big = running("big", "b", ("n01", (0, 1, 2, 3)), started_at=10, borrowing=True)
    decisions = decide(nodes(2), [vc("a", 8), vc("b", 0)], [*small, big], [queued("mine", gpus=4)])
    assert preempted(decisions) == {"big"}


def test_a_fifo_vc_reclaims_its_whole_quota_in_one_pass():
    """The head's place is kept for it while its victims let go, so the jobs behind it
    need not wait a pass each to take theirs."""
    busy = [
        running(f"b{gpu}", "b", ("n00", (gpu,)), started_at=gpu, borrowing=True) for gpu in range(4)
    ]
    jobs = [queued(f"mine{index}", gpus=1, at=index) for index in range(3)]
    decisions = decide(nodes(1), [vc("a", 4), vc("b", 0)], busy, jobs)
    assert preempted(decisions) == {"b3", "b2", "b1"}
    assert {p.for_job for p in decisions.preemptions} == {"mine0", "mine1", "mine2"}


def test_a_borrower_the_job_does_not_need_is_kept():
    """The most recently started borrower sits on a node the job cannot use anyway."""
    busy = [
        running("elsewhere", "b", ("n00", (0,)), started_at=90, borrowing=True),
        running("in-the-way", "b", ("n01", (0, 1)), started_at=10, borrowing=True),
        running("guaranteed", "b", ("n00", (1, 2, 3)), started_at=5),
    ]
    decisions = decide(nodes(2), [vc("a", 4), vc("b", 3)], busy, [queued("mine", gpus=4)])
    assert preempted(decisions) == {"in-the-way"}


def test_user_preemptible_jobs_give_way_to_guaranteed_ones():
    busy = [running("cheap", "b", ("n00", (0, 1, 2, 3)), preemptible=True)]
    decisions = decide(nodes(1), [vc("a", 4), vc("b", 4)], busy, [queued("mine", gpus=4)])
    assert preempted(decisions) == {"cheap"}


def test_a_job_does_not_preempt_its_own_vcs_borrowers_ahead_of_it():
    """A borrower queued before it in the same FIFO VC would come back ahead of it, hold
    it back, start again first and be preempted again, for ever; a later one may go."""
    cluster = (node("g"), node("x", gpus=8), node("y", gpus=8))
    eight = tuple(range(8))
    busy = [
        running("guaranteed", "a", ("g", (0, 1, 2, 3)), queued_at=1.0),
        # Too big for what is left of the quota, so not covered by it.
        running("earlier", "a", ("x", eight), borrowing=True, queued_at=5.0),
        running("later", "a", ("y", eight), borrowing=True, queued_at=50.0),
    ]
    decisions = decide(cluster, [vc("a", 8)], busy, [queued("mine", gpus=4, at=30)])
    assert preempted(decisions) == {"later"}

    decisions = decide(cluster, [vc("a", 8)], busy[:2], [queued("mine", gpus=4, at=30)])
    assert preempted(decisions) == set()


def test_a_preemptible_job_holds_no_guaranteed_work_back_even_under_fifo():
    """It could never be guaranteed work: waiting for it would keep the VC from its quota
    for as long as nothing is idle."""
    busy = [running("theirs", "b", ("n00", (0, 1, 2, 3)), borrowing=True)]
    jobs = [queued("cheap", gpus=4, at=0, preemptible=True), queued("mine", gpus=4, at=1)]
    decisions = decide(nodes(1), [vc("a", 4), vc("b", 0)], busy, jobs)
    assert {p.for_job for p in decisions.preemptions} == {"mine"}
    assert reasons(decisions)["cheap"] == "needs 4 A100; largest free block is 0"

    with_own = [running("own", "a", ("n00", (0, 1, 2, 3)), preemptible=True, queued_at=0.0)]
    decisions = decide(nodes(1), [vc("a", 4)], with_own, [queued("mine", gpus=4, at=1)])
    assert preempted(decisions) == {"own"}


def test_guaranteed_jobs_are_never_preempted():
    busy = [running("theirs", "b", ("n00", (0, 1, 2, 3)))]
    decisions = decide(nodes(1), [vc("a", 4), vc("b", 4)], busy, [queued("mine", gpus=4)])
    assert preempted(decisions) == set()
    assert reasons(decisions)["mine"] == "needs 4 A100; largest free block is 0"


def test_a_borrower_its_own_vc_quota_now_covers_is_not_preempted():
    """VC b's job started borrowing, but b's other work has ended since: preempting it
    would only make b take it back at once."""
    busy = [
        running("covered", "b", ("n00", (0, 1, 2, 3)), started_at=10, borrowing=True),
        running("beyond", "b", ("n01", (0, 1, 2, 3)), started_at=20, borrowing=True),
    ]
    jobs = [queued("mine", gpus=4), queued("theirs", "b", gpus=4)]
    decisions = decide(nodes(2), [vc("a", 4), vc("b", 4)], busy, jobs)
    assert preempted(decisions) == {"beyond"}
    assert reasons(decisions)["theirs"].startswith("beyond VC b's A100 quota (4 of 4")


def test_borrowers_are_not_preempted_for_work_beyond_quota():
    busy = [running("borrower", "b", ("n00", (0, 1, 2, 3)), borrowing=True)]
    decisions = decide(nodes(1), [vc("a", 2), vc("b", 0)], busy, [queued("mine", gpus=4)])
    assert preempted(decisions) == set()


def test_releasing_gpus_are_kept_for_the_job_they_were_preempted_for():
    """A borrower holds 6 of a node's 8 GPUs, 2 are idle; a guaranteed 8-GPU job preempts
    it. Nobody else may take the 2 idle GPUs or the 6 being released meanwhile, and the
    next pass takes no further victims."""
    cluster = (node("n1", gpus=8), node("n2", gpus=8))
    vcs = [vc("a", 8), vc("b", 0)]
    busy = [
        running("victim", "b", ("n1", tuple(range(6))), started_at=10, borrowing=True),
        running("other", "b", ("n2", tuple(range(8))), started_at=5, borrowing=True),
    ]
    jobs = [queued("mine", "a", gpus=8, at=50), queued("extra", "b", gpus=2, at=60)]
    first = snapshot(cluster, vcs, busy, jobs)
    decisions = schedule(first)
    assert preempted(decisions) == {"victim"}
    assert started(decisions) == []
    assert "extra" in reasons(decisions)
    assert {worker.node for worker in decisions.claims["mine"]} == {"n1"}

    second = advance(first, decisions)  # the victim is still releasing its GPUs
    decisions = schedule(second)
    assert preempted(decisions) == set()
    assert started(decisions) == []
    assert reasons(decisions)["mine"].startswith("starts once")

    third = without(advance(second, decisions), "victim")
    decisions = schedule(third)
    assert started(decisions) == ["mine"]
    assert gpus_by_node(decisions, "mine") == {"n1": 8}


def test_a_preempted_job_comes_back_at_the_head_of_its_queue():
    cluster = SimulatedCluster(
        nodes=nodes(1, gpus=4),
        vcs=(vc("a", 4), vc("b", 0)),
        run_time=lambda job: 1000.0,
    )
    borrower = queued("borrower", "b", gpus=4, at=5)
    cluster.submit(borrower)
    assert started(cluster.step(10.0)) == ["borrower"]
    cluster.submit(queued("later", "b", gpus=4, at=20))
    cluster.submit(queued("mine", "a", gpus=4, at=30))

    decisions = cluster.step(40.0)
    assert preempted(decisions) == {"borrower"}
    assert started(decisions) == ["mine"]
    assert cluster.queued["borrower"].queued_at == 5  # its place in the queue is kept
    assert cluster.preemptions == 1

    cluster.finish_until(cluster.next_end())
    assert started(cluster.step(1040.0)) == ["borrower"]


def test_a_kept_place_counts_against_the_quota_before_borrowers_do():
    """The small job borrows because the big one's claim uses the quota; in the next pass
    the claim still comes first, so the big job gets its place."""
    cluster = SimulatedCluster(
        nodes=(node("n00"), node("n01", gpus=1)),
        vcs=(vc("a", 4), vc("b", 0)),
        run_time=lambda job: 1000.0,
    )
    borrower = running("b1", "b", ("n00", (0, 1, 2, 3)), started_at=10, borrowing=True)
    cluster.add_running(borrower, 1010.0, queued("b1", "b", gpus=4, at=5))
    cluster.submit(queued("big", gpus=4, at=20))
    cluster.submit(queued("small", gpus=1, at=20))
    decisions = cluster.step(30.0)
    assert preempted(decisions) == {"b1"}
    assert sorted(started(decisions)) == ["big", "small"]
    assert cluster.running["small"].borrowing
    assert "b1" in cluster.queued


def test_the_interactive_gpu_limit_holds_back_interactive_jobs_only():
    busy = [running("notebook", "a", ("n00", (0,)), interactive=True)]
    jobs = [
        queued("ide", gpus=2, at=0, interactive=True),
        queued("batch", gpus=2, at=1),
    ]
    decisions = decide(nodes(1), [vc("a", 4, Policy.RF, max_interactive_gpus=2)], busy, jobs)
    assert started(decisions) == ["batch"]
    assert reasons(decisions)["ide"] == (
        "VC a allows 2 interactive GPUs and 1 are in use; this job needs 2"
    )


# --- wait reasons -------------------------------------------------------------------------


def test_wait_reasons_name_what_is_missing():
    cluster = (*nodes(2, gpus=4), node("cordoned", 8, "H100", schedulable=False))
    busy = [running("r1", "a", ("n00", (0,))), running("r2", "a", ("n01", (0, 1)))]
    jobs = [
        queued("two-fours", gpus=4, workers=2, at=0),
        queued("three-twos", gpus=2, workers=3, at=1),
        queued("nowhere", gpus=1, gpu_type="V100", at=2),
        queued("h100", gpus=1, gpu_type="H100", at=3),
        queued("too-big", gpus=16, at=4),
        queued("lost", "ghost", gpus=1, at=5),
    ]
    decisions = decide(cluster, [vc("a", 32, Policy.RF)], busy, jobs)
    waits = reasons(decisions)
    assert waits["two-fours"] == "needs 2 x 4 A100 on separate nodes; largest free block is 3"
    assert waits["three-twos"] == (
        "needs 3 x 2 A100; largest free block is 3, and only 2 such blocks are free"
    )
    assert waits["nowhere"].endswith("no schedulable node has GPU type V100")
    assert waits["h100"].endswith("no schedulable node has GPU type H100")
    assert waits["too-big"] == "needs 16 A100 on one node; the largest A100 node has 4"
    assert waits["lost"] == "VC ghost does not exist"


# --- start-time estimates -----------------------------------------------------------------


def test_estimated_start_times_follow_wall_time_limits():
    """One 4-GPU node held until t=200. A 4-GPU job (wall time 50) waits for it, then a
    2-GPU job (default run time 30) starts beside a 2-GPU one started at once."""
    busy = [running("r", "a", ("n00", (0, 1, 2, 3)), deadline=200.0)]
    jobs = [
        queued("first", gpus=4, at=0, max_wall_time=50.0),
        queued("second", gpus=2, at=1),
        queued("third", gpus=2, at=2),
        queued("fourth", gpus=4, at=3),
    ]
    estimates = estimate_start_times(snapshot(nodes(1), [vc("a", 4)], busy, jobs), 30.0)
    assert estimates == {"first": 200.0, "second": 250.0, "third": 250.0, "fourth": 280.0}


def test_estimates_assume_a_job_without_deadline_runs_the_default_time():
    busy = [running("r", "a", ("n00", (0, 1, 2, 3)), started_at=90.0)]
    estimates = estimate_start_times(
        snapshot(nodes(1), [vc("a", 4)], busy, [queued("next", gpus=4)], now=100.0), 30.0
    )
    assert estimates == {"next": 120.0}


# --- bounded work -------------------------------------------------------------------------


def test_thousands_of_borrowers_do_not_slow_the_victim_search_down():
    """4,000 one-GPU borrowers on 500 nodes; guaranteed jobs that need 16 whole nodes, 600
    single GPUs at once, or one GPU each find their victims, and a job no victims can
    serve is refused fast."""
    cluster = nodes(500, gpus=8)
    busy = [
        running(f"b{index}", "b", (f"n{index // 8:02d}", (index % 8,)),
                started_at=index, borrowing=True)
        for index in range(4000)
    ]  # fmt: skip
    jobs = [
        queued("wide", gpus=8, workers=16, at=0),
        *(queued(f"one{index}", gpus=1, at=1 + index) for index in range(100)),
        queued("too-wide", "c", gpus=8, workers=600, at=200),
        queued("many", "d", gpus=1, workers=600, at=300),
    ]
    vcs = [vc("a", 4000, Policy.RF), vc("b", 0), vc("c", 8000), vc("d", 600)]
    began = time.process_time()  # this process's CPU: what other load on the host leaves alone
    decisions = decide(cluster, vcs, busy, jobs)
    elapsed = time.process_time() - began
    wide = {p.job_id for p in decisions.preemptions if p.for_job == "wide"}
    assert len(wide) == 16 * 8
    assert len(preempted(decisions)) == 16 * 8 + 100 + 600
    assert "too-wide" in reasons(decisions)
    assert elapsed < 2.0


def test_a_search_bound_to_fail_gives_up_fast_however_many_borrowers():
    """3,500 one-GPU borrowers on 500 nodes, each node also running a guaranteed job, so
    no node can be freed whole: 1,000 queued 8-GPU jobs of 50 VCs find no victims, fast."""
    cluster = nodes(500, gpus=8)
    busy = [running(f"g{index}", "owner", (f"n{index:02d}", (0,))) for index in range(500)]
    busy += [
        running(f"b{index}-{gpu}", "b", (f"n{index:02d}", (gpu,)), borrowing=True)
        for index in range(500)
        for gpu in range(1, 8)
    ]
    vcs = [vc("owner", 500), vc("b", 0), *(vc(f"v{index}", 8, Policy.RF) for index in range(50))]
    jobs = [
        queued(f"j{index}-{rank}", f"v{index}", gpus=8, at=rank)
        for index in range(50)
        for rank in range(20)
    ]
    began = time.process_time()  # this process's CPU: what other load on the host leaves alone
    decisions = decide(cluster, vcs, busy, jobs)
    elapsed = time.process_time() - began
    assert preempted(decisions) == set()
    assert len(decisions.waits) == 1000
    assert elapsed < 1.0
