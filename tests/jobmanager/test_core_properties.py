"""Invariants of the scheduling core on random clusters, quotas and queues (hypothesis)."""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobmanager.core.overdue import is_overdue, was_overdue
from jobmanager.core.placement import ClusterState
from jobmanager.core.preemption import ahead_in_its_queue
from jobmanager.core.scheduler import covered_borrowers, queue_order, schedule
from jobmanager.core.snapshot import (
    Decisions,
    JobShape,
    NodeState,
    Placement,
    Policy,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    VcState,
    WorkerPlacement,
)
from jobmanager.core.timeline import SimulatedCluster
from tests.jobmanager.core_builders import GIB, PLENTY, advance

NOW = 200.0
ZONES = ((), (), (("zone", "a"),), (("zone", "b"),))
SELECTORS = ((), (), (), (), (), (("zone", "a"),))
DEDICATED = ("", "", "", "vc0", "vc1")  # the VC a node is bound to, if any
SWITCHES = ("", "s0", "s0", "s1")  # the network switch a node hangs under, if known
EXAMPLES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _choice(*options):
    """One of these (repeat an option to make it likelier); built once per option set,
    since building strategies is most of what generating an example costs."""
    return st.sampled_from(options)


@st.composite
def shapes(draw, gpu_types: tuple[str, ...], small: bool = False) -> JobShape:
    """Job shapes; ``small`` ones (for running jobs) fill nodes up more evenly."""
    gpu_type = draw(_choice(*gpu_types))
    gpu_counts = (1, 1, 2, 2, 4) if small else (1, 1, 1, 2, 2, 4, 8)
    gpus = 0 if gpu_type == "cpu" else draw(_choice(*gpu_counts))
    return JobShape(
        gpu_type=gpu_type,
        workers=draw(_choice(1, 1, 1, 2, 3)),
        per_worker=Resources(
            gpus,
            draw(_choice(1000, 2000) if small else _choice(1000, 2000, 4000, 8000)),
            draw(_choice(1, 4, 16, 32)) * GIB,
        ),
        node_selector=() if small else draw(_choice(*SELECTORS)),
        whole_nodes=draw(_choice(False, False, False, True)),
        same_switch=False if small else draw(_choice(False, False, True)),
    )


@st.composite
def snapshots(draw) -> Snapshot:
    """A few nodes of mixed types (some cordoned), VCs with quotas, running jobs with real
    placements (some borrowing, preemptible or releasing) and a queue."""
    nodes = []
    for index in range(draw(st.integers(1, 6))):
        gpu_type = draw(_choice("A100", "A100", "V100", "cpu"))
        nodes.append(
            NodeState(
                name=f"n{index}",
                gpu_type=gpu_type,
                capacity=Resources(
                    0 if gpu_type == "cpu" else draw(_choice(2, 4, 8)),
                    draw(_choice(8000, 16000, 32000)),
                    draw(_choice(64, 128)) * GIB,
                ),
                labels=draw(_choice(*ZONES)),
                schedulable=draw(_choice(True, True, True, True, False)),
                dedicated_to=draw(_choice(*DEDICATED)),
                switch=draw(_choice(*SWITCHES)),
            )
        )
    gpu_types = sorted({node.gpu_type for node in nodes})
    # Crowded: the first VC's quota is the whole cluster, the others' nothing, and the
    # others' borrowers fill it, so that the first VC's guaranteed work has to preempt.
    crowded = draw(st.booleans())
    total_gpus = defaultdict(int)
    for node in nodes:
        total_gpus[node.gpu_type] += node.capacity.gpus
    vcs = tuple(
        VcState(
            name=f"vc{index}",
            quota={
                gpu_type: Resources(
                    (total_gpus[gpu_type] if index == 0 else 0)
                    if crowded
                    else draw(st.integers(0, max(total_gpus[gpu_type], 1))),
                    draw(_choice(PLENTY, PLENTY, 16000)),
                    PLENTY,
                )
                for gpu_type in gpu_types
            },
            policy=draw(_choice(*Policy)),
            max_interactive_gpus=draw(_choice(None, None, 2, 4)),
            lends_dedicated=draw(st.booleans()),
        )
        for index in range(draw(st.integers(2 if crowded else 1, 3)))
    )
    vc_names = [vc.name for vc in vcs]

    # Running jobs are placed on the cluster as it was when they started (nodes cordoned
    # since then included).
    placing = ClusterState(
        [replace(node, schedulable=True) for node in nodes], draw(_choice(*Placement))
    )
    running = []
    for index in range(draw(st.integers(8 if crowded else 0, 16))):
        shape = draw(shapes(tuple(gpu_types), small=True))
        placement = placing.place(shape)
        if placement is None:
            continue
        started_at = float(draw(st.integers(0, 19)) * 10)
        running.append(
            RunningJob(
                id=f"r{index}",
                vc=draw(_choice(*(vc_names[1:] if crowded else vc_names))),
                shape=shape,
                placement=placement,
                started_at=started_at,
                queued_at=started_at - draw(_choice(0, 0, 20, 100)),
                priority=draw(st.integers(0, 2)),
                preemptible=draw(_choice(False, False, True)),
                borrowing=draw(
                    _choice(True, True, True, False) if crowded else _choice(True, False)
                ),
                interactive=draw(_choice(False, False, False, True)),
                releasing=draw(_choice(*[False] * (9 if crowded else 4), True)),
            )
        )
    queued = tuple(
        QueuedJob(
            id=f"q{index}",
            vc=draw(_choice(*([vc_names[0]] if crowded else [*vc_names, "ghost"]))),
            shape=draw(shapes((*gpu_types, *gpu_types, *gpu_types, "H100"))),
            queued_at=float(draw(st.integers(0, 15)) * 10),
            priority=draw(_choice(0, 0, 1, 2)),
            preemptible=draw(_choice(False, False, False, True)),
            interactive=draw(_choice(False, False, False, True)),
        )
        for index in range(draw(st.integers(0, 10)))
    )
    return Snapshot(
        now=NOW,
        nodes=tuple(nodes),
        vcs=vcs,
        running=tuple(running),
        queued=queued,
        placement=draw(_choice(*Placement)),
        starvation_seconds=draw(_choice(50.0, 10_000.0)),
    )


@EXAMPLES
@given(snapshots())
def test_decisions_never_over_commit_a_node_nor_split_a_gang(snapshot):
    """Three invariants checked on the same examples: no GPU, CPU or memory of a node
    is given twice; every start places the whole gang where it may run; every queued job
    is decided once and only borrowers are preempted."""
    decisions = schedule(snapshot)
    _assert_no_node_over_committed(snapshot, decisions)
    _assert_whole_gangs_where_they_may_run(snapshot, decisions)
    _assert_decided_once_and_only_borrowers_preempted(snapshot, decisions)
    _assert_whole_nodes_alone_and_one_switch_kept(snapshot, decisions)
    # Without reasons (for estimates) the same is decided.
    quiet = schedule(replace(snapshot, explain=False))
    assert (quiet.starts, quiet.preemptions, quiet.claims, quiet.waits) == (
        decisions.starts,
        decisions.preemptions,
        decisions.claims,
        [],
    )


def _assert_no_node_over_committed(snapshot: Snapshot, decisions: Decisions) -> None:
    """Running jobs (victims have not let go yet) and starts together fit every node."""
    by_node = {node.name: node for node in snapshot.nodes}
    holdings = [worker for job in snapshot.running for worker in job.placement]
    holdings += [worker for start in decisions.starts for worker in start.placement]
    gpus_taken: dict[str, list[int]] = defaultdict(list)
    used: dict[str, Resources] = defaultdict(Resources)
    for worker in holdings:
        gpus_taken[worker.node].extend(worker.gpus)
        used[worker.node] += Resources(len(worker.gpus), worker.millicpus, worker.memory)
    for name, gpus in gpus_taken.items():
        capacity = by_node[name].capacity
        assert len(gpus) == len(set(gpus)), f"a GPU of {name} is used twice"
        assert set(gpus) <= set(range(capacity.gpus))
        assert used[name].fits_in(capacity), f"{name} is over-committed"


def _assert_whole_gangs_where_they_may_run(snapshot: Snapshot, decisions: Decisions) -> None:
    """Exactly the gang's workers, each exactly its size, on schedulable nodes of its GPU
    type whose labels match its selector; on a node dedicated to another VC only a job
    its user made preemptible, and only where that VC lends its nodes."""
    by_node = {node.name: node for node in snapshot.nodes}
    jobs = {job.id: job for job in snapshot.queued}
    lenders = {vc.name for vc in snapshot.vcs if vc.lends_dedicated}
    for start in decisions.starts:
        job = jobs[start.job_id]
        shape = job.shape
        assert len(start.placement) == shape.workers
        for worker in start.placement:
            node = by_node[worker.node]
            if node.dedicated_to not in ("", job.vc):
                assert job.preemptible and node.dedicated_to in lenders, (
                    f"{job.id} of {job.vc} on {node.name}, dedicated to {node.dedicated_to}"
                )
            assert node.schedulable
            assert node.gpu_type == shape.gpu_type
            assert set(shape.node_selector) <= set(node.labels)
            assert len(set(worker.gpus)) == len(worker.gpus)
            if shape.takes_whole_nodes:  # all of the node, at least its size
                capacity = node.capacity
                assert (len(worker.gpus), worker.millicpus, worker.memory) == (
                    capacity.gpus,
                    capacity.millicpus,
                    capacity.memory,
                )
                assert shape.per_worker.fits_in(capacity)
                continue
            assert len(worker.gpus) == shape.per_worker.gpus
            assert (worker.millicpus, worker.memory) == (
                shape.per_worker.millicpus,
                shape.per_worker.memory,
            )


def _assert_whole_nodes_alone_and_one_switch_kept(snapshot: Snapshot, decisions: Decisions) -> None:
    """A whole-node job (running or started) shares none of its nodes with another job; a
    job that asks for one switch has all its workers under one known switch (or on one
    node)."""
    switches = {node.name: node.switch for node in snapshot.nodes}
    shapes = {job.id: job.shape for job in (*snapshot.running, *snapshot.queued)}
    holders: dict[str, set[str]] = defaultdict(set)
    placements = [(job.id, job.placement) for job in snapshot.running]
    placements += [(start.job_id, start.placement) for start in decisions.starts]
    for job_id, placement in placements:
        for worker in placement:
            holders[worker.node].add(job_id)
    for job_id, placement in placements:
        if shapes[job_id].takes_whole_nodes:
            for worker in placement:
                assert holders[worker.node] == {job_id}, f"{job_id} shares {worker.node}"
    for start in decisions.starts:
        if shapes[start.job_id].needs_one_switch:
            nodes = {worker.node for worker in start.placement}
            under = {switches[name] for name in nodes}
            assert len(nodes) == 1 or (len(under) == 1 and "" not in under), (
                f"{start.job_id} straddles {sorted(under)}"
            )


def _assert_decided_once_and_only_borrowers_preempted(
    snapshot: Snapshot, decisions: Decisions
) -> None:
    decided = [start.job_id for start in decisions.starts] + [w.job_id for w in decisions.waits]
    assert sorted(decided) == sorted(job.id for job in snapshot.queued)
    running = {job.id: job for job in snapshot.running}
    queued = {job.id: job for job in snapshot.queued}
    waiting = {wait.job_id for wait in decisions.waits}
    victims = [preemption.job_id for preemption in decisions.preemptions]
    assert len(victims) == len(set(victims))
    for preemption in decisions.preemptions:
        assert running[preemption.job_id].can_be_preempted
        beneficiary = queued[preemption.for_job]
        assert preemption.for_job in waiting and not beneficiary.preemptible
        assert beneficiary.shape.gpu_type == running[preemption.job_id].shape.gpu_type
    for start in decisions.starts:
        assert start.borrowing or not queued[start.job_id].preemptible


@st.composite
def gang_snapshots(draw) -> Snapshot:
    """A cluster of one GPU type under two switches (some nodes' unknown, some dedicated),
    small running jobs (some borrowing or releasing), and a queue of gangs, many asking
    whole nodes or one switch, so that such gangs start, preempt and wait often."""
    nodes = tuple(
        NodeState(
            name=f"n{index}",
            gpu_type="A100",
            capacity=Resources(draw(_choice(4, 8)), 32000, 256 * GIB),
            schedulable=draw(_choice(True, True, True, False)),
            dedicated_to=draw(_choice("", "", "", "vc1")),
            switch=draw(_choice("s0", "s0", "s1", "s1", "")),
        )
        for index in range(draw(st.integers(2, 8)))
    )
    total = sum(node.capacity.gpus for node in nodes)
    vcs = tuple(
        VcState(
            name=f"vc{index}",
            quota={"A100": Resources(draw(st.integers(0, total)), PLENTY, PLENTY)},
            policy=draw(_choice(*Policy)),
            lends_dedicated=draw(st.booleans()),
        )
        for index in range(2)
    )
    placing = ClusterState([replace(node, schedulable=True) for node in nodes])
    running = []
    for index in range(draw(st.integers(0, 8))):
        shape = JobShape("A100", 1, Resources(draw(_choice(1, 2, 4)), 1000, GIB))
        placement = placing.place(shape)
        if placement is not None:
            running.append(
                RunningJob(
                    id=f"r{index}",
                    vc=draw(_choice("vc0", "vc1")),
                    shape=shape,
                    placement=placement,
                    started_at=float(draw(st.integers(0, 19)) * 10),
                    borrowing=draw(st.booleans()),
                    releasing=draw(_choice(False, False, False, True)),
                )
            )
    queued = tuple(
        QueuedJob(
            id=f"q{index}",
            vc=draw(_choice("vc0", "vc1")),
            shape=JobShape(
                "A100",
                draw(_choice(2, 2, 3)),
                Resources(draw(_choice(1, 2, 4, 4, 8)), 1000, GIB),
                whole_nodes=draw(st.booleans()),
                same_switch=draw(st.booleans()),
            ),
            queued_at=float(draw(st.integers(0, 15)) * 10),
            preemptible=draw(_choice(False, False, True)),
        )
        for index in range(draw(st.integers(1, 6)))
    )
    return Snapshot(
        now=NOW,
        nodes=nodes,
        vcs=vcs,
        running=tuple(running),
        queued=queued,
        placement=draw(_choice(*Placement)),
    )


@EXAMPLES
@given(gang_snapshots())
def test_gangs_asking_whole_nodes_or_one_switch_get_them_and_nothing_is_over_committed(
    snapshot,
):
    decisions = schedule(snapshot)
    _assert_no_node_over_committed(snapshot, decisions)
    _assert_whole_gangs_where_they_may_run(snapshot, decisions)
    _assert_decided_once_and_only_borrowers_preempted(snapshot, decisions)
    _assert_whole_nodes_alone_and_one_switch_kept(snapshot, decisions)
    # Where the victims have let go, the gangs start in the places kept for them.
    gone = {preemption.job_id for preemption in decisions.preemptions}
    gone |= {job.id for job in snapshot.running if job.releasing}
    later = advance(snapshot, decisions, gone=gone)
    again = schedule(later)
    _assert_no_node_over_committed(later, again)
    _assert_whole_nodes_alone_and_one_switch_kept(later, again)


@EXAMPLES
@given(snapshots())
def test_a_vc_within_its_quota_is_not_kept_waiting_by_borrowers(snapshot):
    """Take the VCs' queues in the order the scheduler judges them (by their first job),
    each job after every earlier one of its VC started. A job that is not preemptible,
    not interactive and within its VC's quota, and that would fit if every borrower and
    preemptible job left (and every job being stopped were gone), either starts, or
    preemptions are issued for it, or it waits only for jobs being stopped. (Borrowers
    that their own VC's quota now covers count as guaranteed work, and jobs of its own
    VC ahead of it in the queue are spared.)

    The check stops at the first job that claimed resources without starting (what it
    reserved is not in the decisions) and, within a VC, at the first job that may hold
    the rest of the queue back."""
    decisions = schedule(snapshot)
    covered = covered_borrowers(snapshot)
    starts = {start.job_id: start for start in decisions.starts}
    reasons = {wait.job_id: wait.reason for wait in decisions.waits}
    claimants = {preemption.for_job for preemption in decisions.preemptions} | {
        job_id for job_id, reason in reasons.items() if reason.startswith("starts once")
    }
    vcs = {vc.name: vc for vc in snapshot.vcs}
    queues: dict[str, list[QueuedJob]] = defaultdict(list)
    for job in sorted(snapshot.queued, key=queue_order):
        if job.vc in vcs:
            queues[job.vc].append(job)
    # Judged before the job in question: these hold resources when it is judged, or later.
    earlier_starts: list[WorkerPlacement] = []
    for vc_name, jobs in sorted(queues.items(), key=lambda item: queue_order(item[1][0])):
        vc = vcs[vc_name]
        used: dict[str, Resources] = defaultdict(Resources)
        for running in snapshot.running:
            guaranteed = running.id in covered or not (running.preemptible or running.borrowing)
            if running.vc == vc_name and guaranteed:
                used[running.shape.gpu_type] += running.shape.total
        open_queue = True
        for job in jobs:
            if job.id in claimants:
                return
            starved = NOW - job.queued_at >= snapshot.starvation_seconds
            # A reserving policy's first waiting job gets a reservation that later jobs
            # must leave alone (or, with no expected end to plan by, blocks as FIFO).
            may_block = (
                vc.policy in (Policy.FIFO, Policy.RF) and (vc.policy == Policy.FIFO or starved)
            ) or vc.policy.reserves
            quota = vc.quota.get(job.shape.gpu_type, Resources())
            within_quota = (used[job.shape.gpu_type] + job.shape.total).fits_in(quota)
            if job.id in starts:
                earlier_starts.extend(starts[job.id].placement)
                if starts[job.id].borrowing or job.preemptible:
                    open_queue = open_queue and not may_block
                else:
                    used[job.shape.gpu_type] += job.shape.total
                continue
            if not open_queue:
                continue
            if job.interactive or job.preemptible or not within_quota:
                open_queue = not may_block
                continue
            without_borrowers = ClusterState(snapshot.nodes, snapshot.placement)
            for running in snapshot.running:
                stays = running.id in covered or ahead_in_its_queue(running, job)
                if stays or not (running.can_be_preempted or running.releasing):
                    without_borrowers.occupy(running.placement)
            without_borrowers.occupy(earlier_starts)
            assert not without_borrowers.fits(job.shape), (
                f"{job.id} of {vc_name} waits ({reasons[job.id]}) though it is within "
                "quota and fits once borrowers leave"
            )
            open_queue = not may_block


@EXAMPLES
@given(snapshots())
def test_a_place_kept_while_victims_let_go_is_there_when_they_are_gone(snapshot):
    """As in the live system: a pass preempts; in the next one the victims are still
    releasing, and no further victims are taken for the jobs whose places are kept (which
    nobody else gets); once the victims are gone, those jobs start in their places."""
    first = schedule(snapshot)
    kept = first.claims
    victims = {preemption.job_id for preemption in first.preemptions}
    second_snapshot = advance(snapshot, first)
    second = schedule(second_snapshot)
    assert not {p.for_job for p in second.preemptions} & set(kept)
    held = [w for job in second_snapshot.running for w in job.placement]
    taken = held + [w for start in second.starts for w in start.placement]
    gpus = [(worker.node, gpu) for worker in taken for gpu in worker.gpus]
    assert len(gpus) == len(set(gpus))

    gone = {job.id for job in second_snapshot.running if job.releasing} | victims
    third_snapshot = advance(second_snapshot, second, gone=gone)
    third = {start.job_id: start.placement for start in schedule(third_snapshot).starts}
    for job_id, placement in second.claims.items():
        if job_id in kept:
            assert third.get(job_id) == placement, f"{job_id} did not start where kept"


@EXAMPLES
@given(snapshots())
def test_preempted_jobs_come_back_at_the_head_of_their_queue(snapshot):
    specs = {}
    cluster = SimulatedCluster(
        nodes=snapshot.nodes,
        vcs=snapshot.vcs,
        run_time=lambda job: 1000.0,
        placement=snapshot.placement,
        starvation_seconds=snapshot.starvation_seconds,
    )
    for running in snapshot.running:
        if running.releasing:
            continue
        spec = running.as_queued()
        specs[running.id] = spec
        cluster.add_running(running, running.started_at + 1000, spec)
    for job in snapshot.queued:
        cluster.submit(job)

    decisions = cluster.step(NOW)
    assert cluster.preemptions == len(decisions.preemptions)
    restarted = {start.job_id for start in decisions.starts}
    for preemption in decisions.preemptions:
        if preemption.job_id in restarted:
            continue
        requeued = cluster.queued[preemption.job_id]
        # Its submission time kept (what it ran and when it began to wait again noted).
        assert replace(requeued, attained=0.0, waiting_since=None) == specs[preemption.job_id]
        # Nothing submitted after it of the same priority and VC is ahead of it.
        later = [
            job
            for job in cluster.queued.values()
            if job.vc == requeued.vc
            and job.priority == requeued.priority
            and job.queued_at > requeued.queued_at
        ]
        assert all(queue_order(requeued) < queue_order(job) for job in later)
    # Preemptions took effect at once and the jobs they were for were started.
    for preemption in decisions.preemptions:
        assert preemption.for_job in restarted or preemption.for_job in cluster.running
    # Passes at the same instant come to rest: a job preempted, started again and
    # preempted again would never.
    for _ in range(8):
        decisions = cluster.step(NOW, max_passes=1)
        if not (decisions.starts or decisions.preemptions):
            break
    else:
        raise AssertionError("passes at one instant keep starting or preempting jobs")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(snapshots(), gang_snapshots()))
def test_a_simulated_cluster_runs_every_job_that_fits_it(snapshot):
    """Jobs end after a while, nothing new arrives: every queued job that could run on
    the empty cluster (and is not interactive) eventually starts, and no node is ever
    over-committed on the way."""
    vcs = tuple(replace(vc, max_interactive_gpus=None) for vc in snapshot.vcs)
    cluster = SimulatedCluster(
        nodes=snapshot.nodes,
        vcs=vcs,
        run_time=lambda job: 10.0 + len(job.id),
        placement=snapshot.placement,
        starvation_seconds=snapshot.starvation_seconds,
    )
    empty = ClusterState(snapshot.nodes)
    runnable = {
        job.id
        for job in snapshot.queued
        if job.vc in {vc.name for vc in vcs} and empty.fits(job.shape)
    }
    for job in snapshot.queued:
        if job.id in runnable:
            cluster.submit(job)
    for running in snapshot.running:
        spec = QueuedJob(running.id, running.vc, running.shape, queued_at=running.queue_position)
        cluster.add_running(replace(running, releasing=False), running.started_at + 300, spec)
    now, ever_started = NOW, set()
    for _ in range(200):
        decisions = cluster.step(now)
        ever_started |= {start.job_id for start in decisions.starts}
        holding = ClusterState(snapshot.nodes)
        taken = [worker for job in cluster.running.values() for worker in job.placement]
        gpus = [(worker.node, gpu) for worker in taken for gpu in worker.gpus]
        assert len(gpus) == len(set(gpus))
        holding.occupy(taken)
        assert all(
            free.free_millicpus >= 0 and free.free_memory >= 0 for free in holding.nodes.values()
        )
        next_end = cluster.next_end()
        if next_end is None:
            break
        now = next_end
        cluster.finish_until(now)
    assert runnable <= ever_started


@EXAMPLES
@given(snapshots())
def test_a_pass_on_kept_free_capacity_decides_as_one_that_rebuilds_it_and_undoes_itself(
    snapshot,
):
    """The simulator keeps one free-capacity state up to date between passes rather than
    rebuilding it from every running job: a pass on it decides exactly what a pass on a
    rebuilt one does, and leaves it as it found it."""
    free = ClusterState.of(snapshot.nodes, snapshot.running, snapshot.placement)
    gpu_types = {node.gpu_type for node in snapshot.nodes}
    before = (free.free_by_node(), {t: free.pending_gpus(t) for t in gpu_types})

    assert schedule(snapshot, free) == schedule(snapshot)
    assert (free.free_by_node(), {t: free.pending_gpus(t) for t in gpu_types}) == before


@st.composite
def las_snapshots(draw) -> Snapshot:
    """Random snapshots with every VC under least attained service and a wait limit: jobs
    that ran before (attained service), some queued past the limit, some running that were
    past it when they started."""
    snapshot = draw(snapshots())
    vc_names = [vc.name for vc in snapshot.vcs]
    # Running jobs of the queued jobs' VCs, mostly preemptible: what LAS may preempt.
    running = tuple(
        replace(
            job,
            vc=draw(_choice(*vc_names)),
            attained=float(draw(_choice(0, 0, 100, 4000))) * job.shape.total.gpus,
            preemptible=draw(_choice(True, True, False)),
            queued_at=job.started_at - draw(_choice(0, 20, 100)),
        )
        for job in snapshot.running
    )
    queued = tuple(
        replace(job, attained=float(draw(_choice(0, 0, 20, 4000))) * job.shape.total.gpus)
        for job in snapshot.queued
        if job.vc != "ghost"
    )
    return replace(
        snapshot,
        vcs=tuple(replace(vc, policy=Policy.LAS) for vc in snapshot.vcs),
        running=running,
        queued=queued,
        las_thresholds=(1000.0,),
        las_quantum=draw(_choice(0.0, 50.0)),
        las_wait_limit=draw(_choice(30.0, 80.0)),
        las_within_queue=draw(st.booleans()),
    )


def _overdue_examples() -> tuple[Snapshot, Snapshot]:
    """One 8-GPU node, a 80 s limit. (1) The job running there waited 100 s before it
    started: neither a job of a first queue nor an overdue one may preempt it. (2) The node
    is free: a job that ran 70 s on 8 GPUs (past the 500 GPU-s queue) and has waited 130 s
    in all goes before one of the first queue submitted later."""
    node = NodeState("n0", "A100", Resources(8, 32000, 128 * GIB))
    shape = JobShape("A100", 1, Resources(8, 1000, GIB))
    vc = VcState("vc0", {"A100": Resources(8, PLENTY, PLENTY)}, Policy.LAS)
    base = Snapshot(
        now=NOW, nodes=(node,), vcs=(vc,), starvation_seconds=10_000.0,
        las_thresholds=(500.0,), las_quantum=0.0, las_wait_limit=80.0,
    )  # fmt: skip
    held = RunningJob(
        "r0", "vc0", shape, (WorkerPlacement("n0", tuple(range(8)), 1000, GIB),),
        started_at=100.0, queued_at=0.0, preemptible=True,
    )  # fmt: skip
    newcomers = (
        QueuedJob("q0", "vc0", shape, queued_at=150.0),
        QueuedJob("q1", "vc0", shape, queued_at=10.0),
    )
    veteran = QueuedJob("q2", "vc0", shape, queued_at=0.0, attained=8 * 70.0)
    return (
        replace(base, running=(held,), queued=newcomers),
        replace(base, queued=(veteran, newcomers[0])),
    )


@EXAMPLES
@example(_overdue_examples()[0])
@example(_overdue_examples()[1])
@given(las_snapshots())
def test_a_job_past_the_las_wait_limit_is_never_preempted_by_las_and_goes_first(snapshot):
    decisions = schedule(snapshot)

    running = {job.id: job for job in snapshot.running}
    for preemption in decisions.preemptions:
        if preemption.reason.startswith("preempted by least attained service"):
            assert not was_overdue(snapshot, running[preemption.job_id]), preemption
    assert_no_overdue_job_overtaken(snapshot, decisions)


@st.composite
def fair_share_snapshots(draw) -> Snapshot:
    """Random snapshots with every VC sharing fairly between users of unequal past usage,
    under a wait limit that some queued jobs are past."""
    snapshot = draw(snapshots())
    users = ("heavy", "light", "new")
    queued = tuple(
        replace(job, user=draw(_choice(*users)), attained=float(draw(_choice(0, 0, 20))))
        for job in snapshot.queued
        if job.vc != "ghost"
    )
    usage = {
        (vc.name, user): float(draw(_choice(0, 10, 10**6))) for vc in snapshot.vcs for user in users
    }
    return replace(
        snapshot,
        vcs=tuple(replace(vc, policy=Policy.FAIR_SHARE) for vc in snapshot.vcs),
        queued=queued,
        usage=usage,
        las_wait_limit=draw(_choice(30.0, 80.0)),
    )


def _heavy_user_overdue_example() -> Snapshot:
    """One free 8-GPU node, a 80 s limit: the heavy user's job has waited 200 s, the light
    user's 50 s; only one fits."""
    node = NodeState("n0", "A100", Resources(8, 32000, 128 * GIB))
    shape = JobShape("A100", 1, Resources(8, 1000, GIB))
    vc = VcState("vc0", {"A100": Resources(8, PLENTY, PLENTY)}, Policy.FAIR_SHARE)
    return Snapshot(
        now=NOW, nodes=(node,), vcs=(vc,), las_wait_limit=80.0,
        queued=(
            QueuedJob("q0", "vc0", shape, queued_at=0.0, user="heavy"),
            QueuedJob("q1", "vc0", shape, queued_at=150.0, user="light"),
        ),
        usage={("vc0", "heavy"): 10.0**6, ("vc0", "light"): 0.0},
    )  # fmt: skip


@EXAMPLES
@example(_heavy_user_overdue_example())
@given(fair_share_snapshots())
def test_under_fair_share_a_job_past_the_wait_limit_goes_before_lighter_users_jobs(snapshot):
    """No job that is not overdue starts before an overdue job of its VC and shape
    submitted earlier waits on, however little the later job's user used."""
    decisions = schedule(snapshot)

    assert_no_overdue_job_overtaken(snapshot, decisions)


def assert_no_overdue_job_overtaken(snapshot, decisions) -> None:
    """No job that is not overdue started before an overdue job of its VC and shape
    submitted earlier, which still waits."""
    started = decisions.started_ids()
    waiting = [
        job
        for job in snapshot.queued
        if is_overdue(snapshot, job)
        and not job.interactive
        and job.id not in started
        and job.id not in decisions.claims
    ]
    for job in waiting:
        overtaken = [
            later.id
            for later in snapshot.queued
            if later.vc == job.vc
            and later.shape == job.shape
            and later.queued_at > job.queued_at
            and not is_overdue(snapshot, later)
            and later.id in started
        ]
        assert not overtaken, f"{overtaken} started before overdue job {job.id}"
