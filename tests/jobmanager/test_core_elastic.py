"""Elastic jobs in the scheduling core (jobmanager.core.elastic): examples, and invariants
on random clusters, quotas and elastic jobs (hypothesis)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobmanager.core.elastic import (
    may_resize,
    resized,
    schedule_elastic,
    started_shape,
    with_workers,
)
from jobmanager.core.placement import ClusterState
from jobmanager.core.snapshot import (
    Decisions,
    Elastic,
    Policy,
    QueuedJob,
    RunningJob,
    Snapshot,
)
from tests.jobmanager.core_builders import nodes, preempted, queued, running, snapshot, vc

EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def elastic(low: int, high: int, interval: float = 300.0) -> Elastic:
    return Elastic(low, high, interval)


def sizes(decisions: Decisions) -> dict[str, int]:
    """Each started or resized job's number of workers."""
    found = {start.job_id: len(start.placement) for start in decisions.starts}
    found.update({resize.job_id: resize.workers_to for resize in decisions.resizes})
    return found


def after(before: Snapshot, decisions: Decisions, now: float) -> Snapshot:
    """The next snapshot once the decisions are applied and the preempted jobs are gone."""
    queued_by_id = {job.id: job for job in before.queued}
    resizes = {resize.job_id: resize for resize in decisions.resizes}
    victims = preempted(decisions)
    jobs = [
        resized(job, resizes[job.id], before.now) if job.id in resizes else job
        for job in before.running
        if job.id not in victims
    ]
    for start in decisions.starts:
        job = queued_by_id.pop(start.job_id)
        jobs.append(
            RunningJob(
                job.id,
                job.vc,
                started_shape(job, start),
                start.placement,
                started_at=before.now,
                borrowing=start.borrowing,
                queued_at=job.queued_at,
                elastic=job.elastic,
            )
        )
    waiting = [
        replace(job, reserved=decisions.claims.get(job.id, ())) for job in queued_by_id.values()
    ]
    return replace(before, now=now, running=tuple(jobs), queued=tuple(waiting))


# --- examples -----------------------------------------------------------------------------


def test_an_elastic_job_starts_with_its_minimum_when_only_that_fits():
    cluster = nodes(1, gpus=4)
    busy = running("busy", "a", ("n00", (0, 1)))
    job = queued("grow", "a", workers=4, elastic=elastic(2, 4))

    decisions = schedule_elastic(snapshot(cluster, [vc("a", 4)], [busy], [job]))

    assert sizes(decisions) == {"grow": 2}


def test_a_running_elastic_job_grows_into_idle_gpus_and_a_fixed_job_does_not():
    cluster = nodes(2, gpus=4)
    job = running("el", "a", ("n00", (0,)), ("n00", (1,)), elastic=elastic(2, 6))
    fixed = running("fixed", "a", ("n01", (0,)))

    decisions = schedule_elastic(snapshot(cluster, [vc("a", 8)], [job, fixed], now=1000.0))

    assert sizes(decisions) == {"el": 6}
    assert decisions.resizes[0].workers_from == 2
    assert decisions.resizes[0].placement[:2] == job.placement  # it keeps its workers


def test_a_job_resized_within_its_interval_is_left_alone():
    job = running("el", "a", ("n00", (0,)), elastic=elastic(1, 4, interval=600.0))
    recent = replace(job, resized_at=900.0)

    decisions = schedule_elastic(snapshot(nodes(1), [vc("a", 4)], [recent], now=1000.0))

    assert decisions.resizes == []


def test_a_guaranteed_job_shrinks_the_largest_elastic_borrower_instead_of_preempting():
    # VC b's two jobs borrow VC a's GPUs: one fixed, one elastic at 4 of 1..4.
    cluster = nodes(2, gpus=4)
    borrower = running("fixed", "b", *(("n00", (gpu,)) for gpu in range(4)), borrowing=True)
    grown = running("el", "b", *(("n01", (gpu,)) for gpu in range(4)), elastic=elastic(1, 4))
    vcs = [vc("a", 4), vc("b", 4)]
    job = queued("mine", "a", workers=3, at=500.0)
    before = snapshot(cluster, vcs, [borrower, grown], [job], now=1000.0)

    decisions = schedule_elastic(before)

    assert preempted(decisions) == set()
    assert sizes(decisions) == {"el": 1}
    assert decisions.resizes[0].reason == "shrunk for guaranteed work"
    place = {(worker.node, gpu) for worker in decisions.claims["mine"] for gpu in worker.gpus}
    assert place == {("n01", gpu) for gpu in (1, 2, 3)}
    # Once the shrink is applied the job starts on its kept place.
    assert [
        start.job_id for start in schedule_elastic(after(before, decisions, 1001.0)).starts
    ] == ["mine"]


def test_a_borrowing_elastic_job_that_may_not_shrink_yet_is_preempted_whole():
    cluster = nodes(1, gpus=4)
    grown = running(
        "el",
        "b",
        *(("n00", (gpu,)) for gpu in range(4)),
        elastic=elastic(2, 4, interval=3600.0),
        started_at=900.0,
        borrowing=True,  # VC b has no quota
    )
    job = queued("mine", "a", workers=3, at=950.0)

    decisions = schedule_elastic(
        snapshot(cluster, [vc("a", 4), vc("b", 0)], [grown], [job], now=1000.0)
    )

    assert preempted(decisions) == {"el"}
    assert decisions.resizes == []


# --- properties ---------------------------------------------------------------------------


@st.composite
def elastic_snapshots(draw) -> Snapshot:
    """1-4 nodes of 4 GPUs, two or three VCs with quotas, running jobs (some elastic,
    grown or not, some recently resized) placed for real, and a queue (some elastic)."""
    node_count = draw(st.integers(1, 4))
    cluster = nodes(node_count, gpus=4)
    vc_names = ["a", "b", "c"][: draw(st.integers(2, 3))]
    total = node_count * 4
    quotas = [draw(st.integers(0, total)) for _ in vc_names]
    while sum(quotas) > total:
        index = quotas.index(max(quotas))
        quotas[index] -= 1
    policy = draw(st.sampled_from([Policy.FIFO, Policy.RF, Policy.BACKFILL]))
    vcs = [
        replace(vc(name, quota), policy=policy)
        for name, quota in zip(vc_names, quotas, strict=True)
    ]
    now = 10_000.0
    free = ClusterState(cluster)
    jobs: list[RunningJob] = []
    for index in range(draw(st.integers(0, 6))):
        gpus = draw(st.sampled_from([1, 1, 2]))
        low = draw(st.integers(1, 3))
        high = draw(st.integers(low, 5))
        is_elastic = draw(st.booleans())
        workers = draw(st.integers(low, high)) if is_elastic else low
        job = running(f"r{index}", draw(st.sampled_from(vc_names)), ("n00", (0,)))
        shape = with_workers(job.shape, workers)
        shape = replace(shape, per_worker=replace(shape.per_worker, gpus=gpus))
        placement = free.place(shape)
        if placement is None:
            continue
        started_at = draw(st.sampled_from([0.0, now - 100.0]))
        jobs.append(
            replace(
                job,
                shape=shape,
                placement=placement,
                started_at=started_at,
                borrowing=draw(st.booleans()),
                elastic=elastic(low, high, draw(st.sampled_from([60.0, 300.0])))
                if is_elastic
                else None,
                resized_at=draw(st.sampled_from([None, now - 30.0, now - 1000.0])),
            )
        )
    waiting: list[QueuedJob] = []
    for index in range(draw(st.integers(0, 5))):
        low = draw(st.integers(1, 4))
        high = draw(st.integers(low, 6))
        is_elastic = draw(st.booleans())
        waiting.append(
            queued(
                f"q{index}",
                draw(st.sampled_from(vc_names)),
                gpus=draw(st.sampled_from([1, 1, 2])),
                workers=high if is_elastic else low,
                at=float(index),
                elastic=elastic(low, high) if is_elastic else None,
            )
        )
    return snapshot(cluster, vcs, jobs, waiting, now=now)


@given(elastic_snapshots())
@EXAMPLES
def test_sizes_stay_within_each_jobs_range_and_fixed_jobs_keep_theirs(before):
    decisions = schedule_elastic(before)

    jobs = {job.id: job for job in [*before.running, *before.queued]}
    for job_id, workers in sizes(decisions).items():
        job = jobs[job_id]
        if job.elastic is None:
            assert workers == job.shape.workers
        else:
            assert job.elastic.min_workers <= workers <= job.elastic.max_workers


@given(elastic_snapshots())
@EXAMPLES
def test_no_gpu_is_given_twice_and_every_worker_is_whole(before):
    decisions = schedule_elastic(before)

    capacity = {node.name: node.capacity for node in before.nodes}
    held: Counter[tuple[str, int]] = Counter()
    cpus: Counter[str] = Counter()
    old = {job.id: set(job.placement) for job in before.running}
    shapes = {job.id: job.shape for job in [*before.running, *before.queued]}
    for job in before.running:
        for worker in job.placement:
            held.update((worker.node, gpu) for gpu in worker.gpus)
            cpus[worker.node] += worker.millicpus
    new_workers = [(start.job_id, start.placement) for start in decisions.starts]
    new_workers += [
        (resize.job_id, [w for w in resize.placement if w not in old[resize.job_id]])
        for resize in decisions.resizes
    ]
    for job_id, placement in new_workers:
        for worker in placement:
            # A complete worker: its own shape's GPUs, CPU and memory, on one node.
            assert len(worker.gpus) == shapes[job_id].per_worker.gpus
            assert worker.millicpus == shapes[job_id].per_worker.millicpus
            held.update((worker.node, gpu) for gpu in worker.gpus)
            cpus[worker.node] += worker.millicpus
    assert all(count == 1 for count in held.values())
    assert all(gpu < capacity[node].gpus for node, gpu in held)
    assert all(cpus[node] <= capacity[node].millicpus for node in cpus)


@given(elastic_snapshots())
@EXAMPLES
def test_no_job_is_resized_twice_within_its_interval(before):
    decisions = schedule_elastic(before)
    running_by_id = {job.id: job for job in before.running}

    for resize in decisions.resizes:
        assert may_resize(running_by_id[resize.job_id], before.now)
    # and the pass after, a little later, leaves every job just resized alone
    later = after(before, decisions, before.now + 30.0)
    just = {resize.job_id for resize in decisions.resizes} | {
        start.job_id for start in decisions.starts
    }
    again = schedule_elastic(later)
    assert not just & {resize.job_id for resize in again.resizes}


@given(elastic_snapshots(), st.integers(1, 4))
@EXAMPLES
def test_a_vc_within_its_quota_is_not_kept_short_by_other_vcs_elastic_workers(before, workers):
    """VC a asks for work within its quota's unused part; if it would fit with other
    VCs' elastic workers above their minimum gone, a pass gives it a start or a kept
    place."""
    quota = before.vcs[0].quota["A100"].gpus
    # Everything VC a holds counts (a borrower its quota covers is guaranteed work).
    used = sum(job.shape.total.gpus for job in before.running if job.vc == "a")
    if used + workers > quota:
        return
    job = queued("mine", "a", workers=workers, at=-1.0)  # ahead of every queued job
    asking = replace(before, queued=(job,))
    decisions = schedule_elastic(asking)

    placed = "mine" in {start.job_id for start in decisions.starts} or "mine" in decisions.claims
    if placed:
        return
    # It could not be placed: not even with every other VC's elastic extras gone.
    cluster = ClusterState.of(asking.nodes, [_at_minimum_if_other(j) for j in asking.running])
    assert cluster.place(job.shape) is None


def _at_minimum_if_other(job: RunningJob) -> RunningJob:
    if job.vc == "a" or job.elastic is None:
        return job
    keep = job.elastic.min_workers
    return replace(job, placement=job.placement[:keep])


def test_resizes_are_counted_by_job():
    """The decisions say from what size to what size, so that a caller counts them."""
    job = running("el", "a", ("n00", (0,)), elastic=elastic(1, 3))
    decisions = schedule_elastic(snapshot(nodes(1), [vc("a", 4)], [job], now=1000.0))

    counted: defaultdict[str, int] = defaultdict(int)
    for resize in decisions.resizes:
        counted[resize.job_id] += 1
    assert dict(counted) == {"el": 1}
    assert (decisions.resizes[0].workers_from, decisions.resizes[0].workers_to) == (1, 3)
