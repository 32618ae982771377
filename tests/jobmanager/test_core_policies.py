"""Backfill with reservations, least attained service and fair share: examples, and
invariants on random clusters and queues (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobmanager.core.overdue import time_queued
from jobmanager.core.placement import ClusterState
from jobmanager.core.queues import las_level
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import Placement, Policy, QueuedJob, RunningJob, Snapshot
from jobmanager.core.timeline import SimulatedCluster
from jobmanager.simulate import (
    ClusterSpec,
    SyntheticSpec,
    Trace,
    TraceJob,
    generate,
    measure,
    replay,
)
from jobmanager.simulate.cluster import split_quotas
from jobmanager.simulate.engine import ReplayOptions
from jobmanager.simulate.metrics import job_rows
from tests.jobmanager.core_builders import (
    decide,
    node,
    nodes,
    queued,
    reasons,
    running,
    started,
    vc,
)

EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RESERVING = (Policy.BACKFILL, Policy.LAS, Policy.FAIR_SHARE)


# --- examples -----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", RESERVING)
def test_a_short_job_is_backfilled_beside_a_reservation_and_a_long_one_is_not(policy):
    """Two 4-GPU nodes; r1 holds n00 until 500, r2 holds 2 GPUs of n01 until 300. The 8-GPU
    gang must wait until 500 and is reserved both nodes; of the two 2-GPU jobs behind it
    only the one expected to end by then starts (FIFO would start neither, RF the first,
    which delays the gang)."""
    cluster = nodes(2)
    busy = [
        running("r1", "a", ("n00", (0, 1, 2, 3)), expected_end=500.0),
        running("r2", "a", ("n01", (0, 1)), expected_end=300.0),
    ]
    queue = [
        queued("gang", gpus=4, workers=2, at=1.0),
        queued("long", gpus=2, at=2.0, expected_duration=10_000.0),
        queued("short", gpus=2, at=3.0, expected_duration=100.0),
    ]

    decisions = decide(cluster, [vc("a", 8, policy)], busy, queue)

    assert started(decisions) == ["short"]
    assert decisions.reservations == {"gang": 500.0}
    assert "reserved" in reasons(decisions)["gang"]
    assert started(decide(cluster, [vc("a", 8, Policy.FIFO)], busy, queue)) == []
    assert started(decide(cluster, [vc("a", 8, Policy.RF)], busy, queue)) == ["long"]


def test_a_job_too_large_for_any_node_holds_nothing_back():
    cluster = nodes(2)
    queue = [queued("huge", gpus=16, at=1.0), queued("small", gpus=1, at=2.0)]

    decisions = decide(cluster, [vc("a", 8, Policy.BACKFILL)], [], queue)

    assert started(decisions) == ["small"] and decisions.reservations == {}


@pytest.mark.parametrize("preemptible", [False, True])
@pytest.mark.parametrize("policy", list(Policy))
def test_a_job_only_cordoned_nodes_could_hold_holds_nothing_back(policy, preemptible):
    """Three 4-GPU nodes, one cordoned: a 3-worker gang needing a whole node each cannot
    run until an admin returns the node; even under FIFO the 1-GPU job behind it starts
    (as it would once the gang is waiting with the node back, it would not)."""
    cluster = (*nodes(2), node("n02", schedulable=False))
    gang = queued("gang", gpus=4, workers=3, at=1.0, preemptible=preemptible)
    queue = [gang, queued("small", gpus=1, at=2.0, preemptible=preemptible)]

    decisions = decide(cluster, [vc("a", 12, policy)], [], queue)

    assert started(decisions) == ["small"]
    uncordoned = (*nodes(2), node("n02"))
    assert started(decide(uncordoned, [vc("a", 12, policy)], [], queue)) == ["gang"]


def test_las_runs_the_job_that_has_run_least_first_and_preempts_a_long_runner():
    """One 4-GPU node held by a preemptible job that has run 10 GPU-hours: a new job
    (nothing attained) preempts it; a job that ran as much does not."""
    cluster = nodes(1)
    long_runner = running(
        "old", "a", ("n00", (0, 1, 2, 3)), started_at=0.0, preemptible=True, attained=30_000.0
    )
    new = queued("new", gpus=4, at=50.0, preemptible=True)
    as_much = queued("same", gpus=4, at=40.0, preemptible=True, attained=40_000.0)
    base = Snapshot(
        now=7200.0,
        nodes=cluster,
        vcs=(vc("a", 4, Policy.LAS),),
        running=(long_runner,),
        queued=(new, as_much),
        las_thresholds=(3600.0, 8 * 3600.0),
        las_quantum=1800.0,
    )

    decisions = schedule(base)

    assert [(p.job_id, p.for_job) for p in decisions.preemptions] == [("old", "new")]
    assert "least attained service" in decisions.preemptions[0].reason
    # Not before it has run its quantum since it (re)started.
    assert schedule(replace(base, now=1000.0)).preemptions == []
    # And not for a job that ran as much: same queue.
    assert schedule(replace(base, queued=(as_much,))).preemptions == []


def test_an_overdue_las_job_preempts_nothing_and_keeps_its_place_by_a_reservation():
    """Two 4-GPU nodes: a short job of LAS's first queue and a job past 16 GPU-hours. A
    job of the first queue that has not waited the limit preempts the long runner; one
    queued past the wait limit preempts nothing and keeps its place by a reservation
    (its wait is bounded by the running jobs' ends, as backfill's first waiting job's).
    An overdue job that preempted left victims that waited in turn: on Philly, with every
    job preemptible, the default's mean time queued was 1.12x fair share's."""
    cluster = nodes(2)
    short = running(
        "short", "a", ("n00", (0, 1, 2, 3)), started_at=5000.0, preemptible=True,
        queued_at=4000.0, attained=4 * 2200.0,
    )  # fmt: skip
    long_runner = running(
        "long", "a", ("n01", (0, 1, 2, 3)), started_at=0.0, preemptible=True,
        queued_at=0.0, attained=4 * 20_000.0,
    )  # fmt: skip
    overdue = queued("overdue", gpus=4, at=0.0, preemptible=True)
    base = Snapshot(
        now=7200.0,
        nodes=cluster,
        vcs=(vc("a", 8, Policy.LAS),),
        running=(short, long_runner),
        queued=(overdue,),
        las_wait_limit=3600.0,
    )

    decisions = schedule(base)

    assert decisions.preemptions == []
    assert "overdue" in decisions.reservations
    fresh = schedule(replace(base, las_wait_limit=None))
    assert [(p.job_id, p.for_job) for p in fresh.preemptions] == [("long", "overdue")]


def test_a_preempted_las_job_goes_back_to_the_first_queue_after_the_starvation_guard():
    """A job that ran past LAS's threshold and was preempted waits behind a newer job of
    the first queue, until it has waited the starvation guard (an hour by default,
    however long it ran): then it is first again, by its earlier submission."""
    cluster = nodes(1)
    preempted = queued(
        "preempted", gpus=4, at=0.0, preemptible=True, attained=4 * 20_000.0,
        waiting_since=20_000.0,
    )  # fmt: skip
    newer = queued("newer", gpus=4, at=19_000.0, preemptible=True)
    base = Snapshot(
        now=20_000.0 + 1800.0,
        nodes=cluster,
        vcs=(vc("a", 4, Policy.LAS),),
        queued=(preempted, newer),
    )

    assert started(schedule(base)) == ["newer"]
    assert started(schedule(replace(base, now=20_000.0 + 3600.0))) == ["preempted"]
    # LAS's guard is a setting of its own: runnable first's does not move it.
    assert started(schedule(replace(base, starvation_seconds=60.0))) == ["newer"]
    assert started(schedule(replace(base, las_starvation_seconds=1800.0))) == ["preempted"]


@pytest.mark.parametrize(
    ("waited_minutes", "starts"), [(19, ["small"]), (21, [])], ids=["within", "past"]
)
def test_runnable_first_lets_small_jobs_by_a_waiting_gang_for_twenty_minutes(
    waited_minutes, starts
):
    """An 8-GPU node half held by VC b; VC a (RF) queues an 8-GPU gang, then a 1-GPU job.
    By default the small job goes by the gang for its first 20 minutes only; after that
    the gang holds the queue, so that what went by cannot keep it waiting past FIFO's
    (with an hour, RF's p95 JCT was 1.032x FIFO's on the Philly sample)."""
    snapshot = Snapshot(
        now=waited_minutes * 60.0,
        nodes=(node("n", gpus=8),),
        vcs=(vc("a", 8, Policy.RF), vc("b", 4)),
        running=(running("b1", "b", ("n", (0, 1, 2, 3))),),
        queued=(queued("big", gpus=8, at=0.0), queued("small", gpus=1, at=1.0)),
    )
    assert started(schedule(snapshot)) == starts


def test_las_within_queue_gives_a_job_moved_down_back_its_gpus_from_later_jobs():
    """One 4-GPU node held by a preemptible job of LAS's second queue (18,800 GPU-seconds
    at 7,200), submitted at 100.
    A job moved down to that queue after running, submitted at 10, waits: served in
    submission order within the queue (las_within_queue) it preempts the later job; by
    default, or if it was submitted after the running job, it waits."""
    cluster = nodes(1)
    later = running(
        "later", "a", ("n00", (0, 1, 2, 3)), started_at=5000.0, preemptible=True,
        queued_at=100.0, attained=10_000.0,
    )  # fmt: skip
    earlier = queued("earlier", gpus=4, at=10.0, preemptible=True, attained=5_000.0)
    base = Snapshot(
        now=7200.0,
        nodes=cluster,
        vcs=(vc("a", 4, Policy.LAS),),
        running=(later,),
        queued=(earlier,),
        las_thresholds=(3600.0, 8 * 3600.0),
        las_quantum=1800.0,
        las_within_queue=True,
    )

    decisions = schedule(base)

    assert [(p.job_id, p.for_job) for p in decisions.preemptions] == [("later", "earlier")]
    assert schedule(replace(base, las_within_queue=False)).preemptions == []
    after = replace(earlier, id="after", queued_at=200.0)
    assert schedule(replace(base, queued=(after,))).preemptions == []
    # Not before the running job has run its quantum since it (re)started.
    assert schedule(replace(base, now=6000.0)).preemptions == []


@pytest.mark.parametrize("policy", [Policy.FAIR_SHARE, Policy.LAS])
def test_fair_share_lets_the_light_user_by_the_heavy_users_sweep(policy):
    """Under fair share, and under LAS within a queue (none of these jobs has run)."""
    cluster = nodes(1)
    sweep = [queued(f"sweep{index}", gpus=1, at=float(index), user="heavy") for index in range(8)]
    light = queued("light", gpus=1, at=100.0, user="light")
    snapshot = Snapshot(
        now=200.0,
        nodes=cluster,
        vcs=(vc("a", 4, policy),),
        queued=(*sweep, light),
        usage={("a", "heavy"): 50_000.0},
    )

    assert "light" in started(schedule(snapshot))
    assert len(started(schedule(snapshot))) == 4
    fifo = replace(snapshot, vcs=(vc("a", 4, Policy.FIFO),))
    assert "light" not in started(schedule(fifo))


@pytest.mark.parametrize("policy", [Policy.FAIR_SHARE, Policy.LAS])
@pytest.mark.parametrize(
    ("vc_limit", "snapshot_limit"), [(80.0, None), (80.0, 10**6), (None, 80.0)]
)
def test_a_job_past_its_vcs_wait_limit_goes_before_a_lighter_users(
    policy, vc_limit, snapshot_limit
):
    """The VC's wait limit, else the snapshot's: the heavy user's job, queued 200 s, goes
    before the light user's, queued 50 s; with no limit that binds, the light one first."""
    heavy = queued("heavy", gpus=4, at=0.0, user="heavy")
    light = queued("light", gpus=4, at=150.0, user="light")
    snapshot = Snapshot(
        now=200.0,
        nodes=nodes(1),
        vcs=(replace(vc("a", 4, policy), wait_limit=vc_limit),),
        queued=(heavy, light),
        usage={("a", "heavy"): 50_000.0},
        las_wait_limit=snapshot_limit,
    )
    unbound = replace(snapshot, vcs=(vc("a", 4, policy),), las_wait_limit=10**6)

    assert started(schedule(snapshot)) == ["heavy"]
    assert started(schedule(unbound)) == ["light"]


def test_las_serves_its_queues_before_users_shares():
    """A light user's job that has run past the first LAS queue waits behind a heavy
    user's job of the first queue."""
    cluster = nodes(1)
    heavy = [queued(f"heavy{index}", gpus=2, at=float(index), user="heavy") for index in range(2)]
    moved_down = replace(queued("light", gpus=2, at=0.0, user="light"), attained=10**6)
    snapshot = Snapshot(
        now=200.0,
        nodes=cluster,
        vcs=(vc("a", 4, Policy.LAS),),
        queued=(*heavy, moved_down),
        usage={("a", "heavy"): 50_000.0},
    )

    assert set(started(schedule(snapshot))) == {"heavy0", "heavy1"}


def test_backfill_runs_a_job_that_can_still_make_its_deadline_first():
    """One free 4-GPU node: of three 4-GPU jobs, the one whose deadline it can still make
    goes first; one that would miss its deadline anyway keeps its place."""
    cluster = nodes(1)
    first = queued("first", gpus=4, at=1.0)
    urgent = queued("urgent", gpus=4, at=3.0, due=700.0, expected_duration=100.0)
    hopeless = queued("hopeless", gpus=4, at=2.0, due=150.0, expected_duration=100.0)

    assert started(decide(cluster, [vc("a", 4, Policy.BACKFILL)], [], [first, urgent])) == [
        "urgent"
    ]
    assert started(decide(cluster, [vc("a", 4, Policy.BACKFILL)], [], [first, hopeless])) == [
        "first"
    ]
    assert started(decide(cluster, [vc("a", 4, Policy.FIFO)], [], [first, urgent])) == ["first"]


def test_fair_lending_gives_an_idle_gpu_to_the_vc_borrowing_least_for_its_quota():
    """One GPU idle (VC x lends its quota); a borrows 2 GPUs on a quota of 1, b 1 on 3:
    b's job gets the GPU though a's was submitted first (without fair lending, a's)."""
    cluster = nodes(2)
    busy = [
        running("a-own", "a", ("n00", (0,))),
        running("a-borrow", "a", ("n00", (1, 2)), borrowing=True),
        running("b-own", "b", ("n01", (0, 1, 2))),
        running("b-borrow", "b", ("n00", (3,)), borrowing=True),
    ]
    queue = [queued("a1", "a", at=1.0), queued("b1", "b", at=2.0)]
    # (Runnable first: under the reserving policies each VC's first waiting job has a
    # reservation, kept in the order of the VCs' first jobs, whoever borrows.)
    vcs = (vc("a", 1, Policy.RF), vc("b", 3, Policy.RF), vc("x", 4))
    base = Snapshot(now=100.0, nodes=cluster, vcs=vcs, running=tuple(busy), queued=tuple(queue))

    assert started(schedule(replace(base, fair_lending=True))) == ["b1"]
    assert started(schedule(base)) == ["a1"]


def test_victims_that_just_checkpointed_go_first():
    """Two borrowers of equal priority; the one that started last but checkpoints rarely
    would lose more than the one that started first and checkpointed a minute ago."""
    cluster = nodes(2)
    busy = [
        running("early", "b", ("n00", (0, 1, 2, 3)), started_at=0.0, borrowing=True,
                checkpoint_interval=940.0),
        running("late", "b", ("n01", (0, 1, 2, 3)), started_at=500.0, borrowing=True),
    ]  # fmt: skip
    decisions = decide(
        cluster, [vc("a", 4), vc("b", 0)], busy, [queued("mine", gpus=4, at=1.0)], now=1000.0
    )

    assert [p.job_id for p in decisions.preemptions] == ["early"]


# --- invariants ---------------------------------------------------------------------------


@st.composite
def reservation_cases(draw) -> tuple[SimulatedCluster, list[QueuedJob], dict[str, float]]:
    """One VC owning a cluster of 4-GPU nodes, part-filled by jobs with known ends, and a
    queue whose run times are known (expected = real)."""
    cluster_nodes = nodes(draw(st.integers(1, 4)))
    policy = draw(st.sampled_from(RESERVING))
    total = 4 * len(cluster_nodes)
    run_times: dict[str, float] = {}
    sim = SimulatedCluster(
        nodes=cluster_nodes,
        vcs=(vc("a", total, policy),),
        run_time=lambda job: run_times[job.id],
        placement=draw(st.sampled_from(list(Placement))),
        explain=False,
    )
    placing = ClusterState(cluster_nodes)
    for index in range(draw(st.integers(0, 6))):
        spec = queued(f"r{index}", gpus=draw(st.sampled_from((1, 2, 4))))
        placement = placing.place(spec.shape)
        if placement is None:
            continue
        end = float(draw(st.integers(1, 50)) * 10)
        job = RunningJob(spec.id, "a", spec.shape, placement, started_at=0.0, expected_end=end)
        sim.add_running(job, end, spec)
    queue = []
    for index in range(draw(st.integers(1, 8))):
        gpus = draw(st.sampled_from((1, 2, 4)))
        workers = draw(st.sampled_from((1, 1, 1, 2))) if gpus == 4 else 1
        job_id = f"q{index}"
        run_times[job_id] = float(draw(st.integers(1, 60)) * 10)
        queue.append(
            queued(
                job_id,
                gpus=gpus,
                workers=min(workers, len(cluster_nodes)),
                at=float(index),
                expected_duration=run_times[job_id],
            )
        )
    return sim, queue, run_times


@EXAMPLES
@given(reservation_cases())
def test_a_backfilled_job_never_delays_a_reservation(case):
    """With expected run times that come true, every job that is given a reservation
    starts by its shadow time, whatever starts beside it meanwhile."""
    sim, queue, _ = case
    for job in queue:
        sim.submit(job)
    promised: dict[str, float] = {}
    first_start: dict[str, float] = {}
    now = 0.0
    for _ in range(200):
        sim.finish_until(now)
        decisions = sim.step(now)
        for job_id, shadow in decisions.reservations.items():
            promised[job_id] = min(promised.get(job_id, shadow), shadow)
        for start in decisions.starts:
            first_start.setdefault(start.job_id, now)
        next_end = sim.next_end()
        if next_end is None:
            break
        now = next_end
    assert not sim.queued, "every job ends up running"
    for job_id, shadow in promised.items():
        assert first_start[job_id] <= shadow + 1e-6, f"{job_id} started after its reservation"


def running_on(cluster, gpus: list[int], running_job) -> list[RunningJob]:
    """Jobs of ``gpus`` GPUs each, packed onto ``cluster`` while they fit, made running by
    ``running_job(index, spec, placement)``."""
    placing = ClusterState(cluster)
    busy = []
    for index, count in enumerate(gpus):
        spec = queued(f"r{index}", gpus=count)
        placement = placing.place(spec.shape)
        if placement is not None:
            busy.append(running_job(index, spec, placement))
    return busy


def assert_no_gpu_given_twice(decisions, busy: list[RunningJob]) -> None:
    """No GPU is given to two starts, nor to a start while a job not preempted holds it."""
    placed = [worker for start in decisions.starts for worker in start.placement]
    preempted = {p.job_id for p in decisions.preemptions}
    held = {
        (worker.node, gpu)
        for job in busy
        if job.id not in preempted
        for worker in job.placement
        for gpu in worker.gpus
    }
    given_now = [(worker.node, gpu) for worker in placed for gpu in worker.gpus]
    assert len(given_now) == len(set(given_now)) and not set(given_now) & held


@EXAMPLES
@given(
    st.lists(st.sampled_from((1, 2, 4)), min_size=1, max_size=10),
    st.lists(st.integers(1, 40), min_size=10, max_size=10),
    st.integers(0, 3),
)
def test_las_preempts_only_preemptible_jobs_of_a_later_queue(gpus, runs, preemptible_every):
    """Least attained service on a busy node pair: every preemption takes a preemptible
    job of the same VC from a later LAS queue than the job it is for; no GPU is given
    twice; and passes at one instant settle."""
    cluster = nodes(2)
    thresholds = (1000.0, 20_000.0)
    busy = running_on(
        cluster, gpus,
        lambda index, spec, placement: RunningJob(
            spec.id, "a", spec.shape, placement, started_at=0.0,
            preemptible=preemptible_every > 0 and index % (preemptible_every + 1) == 0,
            attained=float(runs[index] * 1000),
        ),
    )  # fmt: skip
    waiting = [
        queued(f"q{index}", gpus=count, at=float(index), preemptible=True)
        for index, count in enumerate(gpus)
    ]
    snapshot = Snapshot(
        now=4000.0,
        nodes=cluster,
        vcs=(vc("a", 8, Policy.LAS),),
        running=tuple(busy),
        queued=tuple(waiting),
        las_thresholds=thresholds,
        las_quantum=0.0,
    )
    decisions = schedule(snapshot)
    by_id = {job.id: job for job in busy}
    queued_by_id = {job.id: job for job in waiting}
    for preemption in decisions.preemptions:
        victim = by_id[preemption.job_id]
        beneficiary = queued_by_id[preemption.for_job]
        assert victim.preemptible and victim.vc == beneficiary.vc
        assert las_level(victim.attained_at(snapshot.now), thresholds) > las_level(
            beneficiary.attained, thresholds
        )
    assert_no_gpu_given_twice(decisions, busy)


@EXAMPLES
@given(
    st.lists(st.sampled_from((1, 2, 4)), min_size=1, max_size=10),
    st.lists(st.integers(1, 40), min_size=10, max_size=10),
    st.lists(st.integers(0, 40), min_size=10, max_size=10),
    st.lists(st.integers(0, 100), min_size=10, max_size=10),
)
def test_las_within_queue_preempts_only_later_queues_or_later_jobs_of_its_own(
    gpus, runs, ran_before, submitted
):
    """Least attained service served in submission order within each queue, on a busy
    node pair: every preemption takes a preemptible job of the same VC from a later LAS
    queue, or from the same queue and submitted after the job it is for; no GPU is
    given twice."""
    cluster = nodes(2)
    thresholds = (1000.0, 20_000.0)
    busy = running_on(
        cluster, gpus,
        lambda index, spec, placement: RunningJob(
            spec.id, "a", spec.shape, placement, started_at=0.0, preemptible=True,
            queued_at=float(submitted[index]), attained=float(runs[index] * 500),
        ),
    )  # fmt: skip
    waiting = [
        queued(
            f"q{index}", gpus=count, at=float(submitted[-1 - index]), preemptible=True,
            attained=float(ran_before[index] * 500),
        )
        for index, count in enumerate(gpus)
    ]  # fmt: skip
    snapshot = Snapshot(
        now=4000.0,
        nodes=cluster,
        vcs=(vc("a", 8, Policy.LAS),),
        running=tuple(busy),
        queued=tuple(waiting),
        las_thresholds=thresholds,
        las_quantum=0.0,
        las_within_queue=True,
    )
    decisions = schedule(snapshot)
    by_id = {job.id: job for job in busy}
    queued_by_id = {job.id: job for job in waiting}
    for preemption in decisions.preemptions:
        victim = by_id[preemption.job_id]
        beneficiary = queued_by_id[preemption.for_job]
        victim_level = las_level(victim.attained_at(snapshot.now), thresholds)
        level = las_level(beneficiary.attained, thresholds)
        assert victim_level > level or (
            victim_level == level and victim.queue_position > beneficiary.queued_at
        )
    assert_no_gpu_given_twice(decisions, busy)


@pytest.mark.parametrize("policy", list(Policy))
def test_every_job_of_a_stream_that_leaves_capacity_starts_within_bounds(policy):
    """A synthetic stream at about half the cluster's capacity, four VCs that lend and
    borrow: under every policy every job runs, and none waits more than a day."""
    trace = generate(SyntheticSpec(jobs=600, vcs=4, seed=3, mean_interarrival=500.0))
    cluster = ClusterSpec(nodes=8, gpus_per_node=8)
    quotas = split_quotas(trace.gpu_seconds_by_vc(), cluster.gpus)
    options = ReplayOptions(preemptible=policy == Policy.LAS, checkpoint_interval=600.0)

    result = replay(trace, cluster, quotas, policy, Placement.PACK, options=options)

    metrics = measure(result)
    assert metrics.completed == len(trace.jobs)
    assert metrics.max_queue_delay < 24 * 3600


@EXAMPLES
@given(
    st.lists(st.sampled_from((1, 2, 4)), min_size=1, max_size=10),
    st.lists(st.integers(0, 40), min_size=10, max_size=10),
    st.lists(st.sampled_from((0.0, 0.0, 3000.0, 9000.0)), min_size=10, max_size=10),
    st.booleans(),
)
def test_an_overdue_job_goes_first_and_preempts_nothing(gpus, runs, waited, preempted_only):
    """Least attained service with a wait limit, on a busy node pair: a job queued past the
    limit in all (with ``preempted_only``: and that has run before) goes first and
    preempts nothing; every job preempts only jobs of a later LAS queue, never one that
    was itself overdue when it started; no GPU is given twice; and while an overdue job
    waits, no job that is not overdue starts unless it is smaller."""
    cluster = nodes(2)
    thresholds = (1000.0, 20_000.0)
    limit = 5000.0
    busy = running_on(
        cluster, gpus,
        lambda index, spec, placement: RunningJob(
            spec.id, "a", spec.shape, placement, started_at=1000.0, preemptible=True,
            queued_at=1000.0 - waited[index], attained=float(runs[index] * 1000),
        ),
    )  # fmt: skip
    waiting = [
        queued(
            f"q{index}", gpus=count, at=4000.0 - waited[-1 - index], preemptible=True,
            attained=float(runs[-1 - index] * 100),
        )
        for index, count in enumerate(gpus)
    ]  # fmt: skip
    snapshot = Snapshot(
        now=4000.0,
        nodes=cluster,
        vcs=(vc("a", 8, Policy.LAS),),
        running=tuple(busy),
        queued=tuple(waiting),
        las_thresholds=thresholds,
        las_quantum=0.0,
        las_wait_limit=limit,
        las_limit_preempted_only=preempted_only,
    )
    decisions = schedule(snapshot)

    def overdue(job: QueuedJob) -> bool:
        if preempted_only and job.attained <= 0:
            return False
        return time_queued(job, snapshot.now) >= limit

    by_id = {job.id: job for job in busy}
    queued_by_id = {job.id: job for job in waiting}
    for preemption in decisions.preemptions:
        victim = by_id[preemption.job_id]
        beneficiary = queued_by_id[preemption.for_job]
        # Was it overdue when it started: queued that long before it, less what it ran.
        held = victim.attained / victim.shape.total.gpus
        started_overdue = victim.started_at - victim.queue_position - held >= limit
        assert not started_overdue or (preempted_only and victim.attained <= 0)
        assert not overdue(beneficiary)
        assert las_level(victim.attained_at(snapshot.now), thresholds) > las_level(
            beneficiary.attained, thresholds
        )
    assert_no_gpu_given_twice(decisions, busy)
    overdue_waiting = [
        job
        for job in waiting
        if overdue(job)
        and job.id not in {start.job_id for start in decisions.starts}
        and job.id not in decisions.claims
    ]
    if overdue_waiting:
        smallest = min(job.shape.total.gpus for job in overdue_waiting)
        for start in decisions.starts:
            job = queued_by_id[start.job_id]
            assert overdue(job) or job.shape.total.gpus < smallest


@EXAMPLES
@given(
    st.lists(
        st.tuples(
            st.integers(0, 20),  # submitted, in units of 300 s
            st.sampled_from((300.0, 1800.0, 7200.0, 30_000.0)),
            st.sampled_from((1, 1, 2, 4, 8)),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from((None, 3600.0, 20_000.0)),
    st.sampled_from((0.0, 120.0)),
    st.booleans(),
    st.booleans(),
)
def test_las_with_a_wait_limit_runs_every_job_and_counts_every_wait(
    jobs, limit, overhead, preempted_only, within_queue
):
    """A random stream of preemptible jobs under least attained service with a wait limit
    (and each queue served in submission order, or not) and a restart overhead, on two
    8-GPU nodes: every job completes; a job's time queued
    (every wait) is at least its first wait, equal to it if it was never preempted; a job
    is never preempted after it started overdue."""
    trace = Trace.of(
        "random",
        [
            TraceJob(f"j{index}", "a", at * 300.0, duration, count)
            for index, (at, duration, count) in enumerate(jobs)
        ],
    )
    cluster = ClusterSpec(nodes=2, gpus_per_node=8)
    options = ReplayOptions(
        preemptible=True,
        checkpoint_interval=600.0,
        las_thresholds=(1800.0,),
        las_quantum=600.0,
        las_wait_limit=limit,
        las_limit_preempted_only=preempted_only,
        las_within_queue=within_queue,
        restart_overhead=overhead,
    )

    result = replay(trace, cluster, {"a": 16}, Policy.LAS, Placement.PACK, options=options)

    assert all(end is not None for end in result.ended)
    for row in job_rows(result):
        assert row["queued"] >= row["wait"] - 1e-6
        if row["preemptions"] == 0:
            assert row["queued"] == pytest.approx(row["wait"])
        else:
            assert row["jct"] >= row["duration"] + row["queued"] - 1e-6
