"""One scheduling pass: from a snapshot to starts, preemptions and reasons to wait.

Two phases. First every VC's jobs that fit within its quota (guaranteed work) are placed,
preempting borrowers when that is the only way; then the rest (jobs beyond their VC's
quota and jobs their users marked preemptible) may borrow what is still idle, and run as
preemptible. Within a VC, jobs go by priority, then submission time, then the largest
gang first; a FIFO VC stops at the first job that cannot start, a runnable-first VC lets
smaller jobs by, unless the waiting job has waited past the starvation guard.

A job that preemptions are issued for starts in a later pass, once its victims are gone;
meanwhile what it will take (their resources, and any free ones beside them) is reserved
for it, so the next pass finds it claimable and takes no further victims.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from jobmanager.core.placement import ClusterState, FreeNode, workers_fitting
from jobmanager.core.snapshot import (
    NO_RESOURCES,
    Decisions,
    JobShape,
    Policy,
    Preemption,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    Start,
    VcState,
    Wait,
    WorkerPlacement,
)

_Fitting = Callable[[FreeNode, list[int]], int]


def queue_order(job: QueuedJob) -> tuple:
    """Priority first, then submission time (kept by preempted jobs, which so come back at
    the head), then the largest gang among jobs submitted at the same instant."""
    return (-job.priority, job.queued_at, -job.shape.total.gpus, -job.shape.workers, job.id)


def preemption_order(job: RunningJob) -> tuple:
    """The first victims: lowest priority, then the most recently started."""
    return (job.priority, -job.started_at, job.id)


@dataclass
class _VcQueue:
    vc: VcState
    jobs: list[QueuedJob]
    blocker: QueuedJob | None = None  # the job that holds the queue back
    blocker_reason: str = ""


class _Borrowers:
    """Running jobs that guaranteed work may preempt, in preemption order, by GPU type and
    by node, with what each holds on each node."""

    def __init__(self, jobs: list[RunningJob]) -> None:
        self.by_type: dict[str, dict[str, RunningJob]] = defaultdict(dict)
        self.on_node: dict[str, dict[str, RunningJob]] = defaultdict(dict)
        self.held: dict[str, dict[str, list[int]]] = {}  # job -> node -> [gpus, cpu, memory]
        self.gpus: dict[str, int] = defaultdict(int)
        for job in sorted(jobs, key=preemption_order):
            self.by_type[job.shape.gpu_type][job.id] = job
            self.gpus[job.shape.gpu_type] += job.shape.total.gpus
            held: dict[str, list[int]] = {}
            for worker in job.placement:
                self.on_node[worker.node][job.id] = job
                amounts = held.setdefault(worker.node, [0, 0, 0])
                amounts[0] += len(worker.gpus)
                amounts[1] += worker.millicpus
                amounts[2] += worker.memory
            self.held[job.id] = held

    def remove(self, job: RunningJob) -> None:
        del self.by_type[job.shape.gpu_type][job.id]
        self.gpus[job.shape.gpu_type] -= job.shape.total.gpus
        for node in self.held[job.id]:
            self.on_node[node].pop(job.id, None)


@dataclass
class _Pass:
    snapshot: Snapshot
    cluster: ClusterState
    borrowers: _Borrowers
    decisions: Decisions = field(default_factory=Decisions)
    guaranteed_use: dict[tuple[str, str], Resources] = field(
        default_factory=lambda: defaultdict(Resources)
    )
    interactive_gpus: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Free capacity and borrowers only shrink during a pass, so a shape that could not be
    # placed, or found no victims, cannot later in the same pass either.
    unplaceable: set[JobShape] = field(default_factory=set)
    no_victims: set[JobShape] = field(default_factory=set)

    def starved(self, job: QueuedJob) -> bool:
        return self.snapshot.now - job.queued_at >= self.snapshot.starvation_seconds

    def place(self, shape: JobShape) -> tuple[WorkerPlacement, ...] | None:
        if shape in self.unplaceable:
            return None
        placement = self.cluster.place(shape)
        if placement is None:
            self.unplaceable.add(shape)
        return placement


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide what starts, what is preempted and why everything else waits."""
    cluster = ClusterState.of(snapshot.nodes, snapshot.running, snapshot.placement)
    state = _Pass(
        snapshot, cluster, _Borrowers([job for job in snapshot.running if job.can_be_preempted])
    )
    for job in snapshot.running:
        if not (job.preemptible or job.borrowing):
            state.guaranteed_use[job.vc, job.shape.gpu_type] += job.shape.total
        if job.interactive:
            state.interactive_gpus[job.vc] += job.shape.total.gpus

    vcs = {vc.name: vc for vc in snapshot.vcs}
    by_vc: dict[str, list[QueuedJob]] = defaultdict(list)
    for job in snapshot.queued:
        if job.vc in vcs:
            by_vc[job.vc].append(job)
        else:
            state.decisions.waits.append(Wait(job.id, f"VC {job.vc} does not exist"))
    queues = [_VcQueue(vcs[name], sorted(jobs, key=queue_order)) for name, jobs in by_vc.items()]
    queues.sort(key=lambda queue: queue_order(queue.jobs[0]))

    deferred: list[tuple[_VcQueue, QueuedJob]] = []
    for queue in queues:
        open_in_phase_one = True
        for job in queue.jobs:
            if queue.blocker is not None or not open_in_phase_one:
                deferred.append((queue, job))  # judged in the second phase, in order
            elif job.preemptible or not _within_quota(state, queue.vc, job):
                deferred.append((queue, job))
                # Under FIFO, or once this job has waited past the starvation guard,
                # nothing behind it may start before it is judged.
                open_in_phase_one = queue.vc.policy != Policy.FIFO and not state.starved(job)
            else:
                _start_guaranteed(state, queue, job)

    deferred.sort(key=lambda item: queue_order(item[1]))
    for queue, job in deferred:
        _start_if_idle(state, queue, job)
    return state.decisions


# --- phase one: guaranteed work -----------------------------------------------------------


def _within_quota(state: _Pass, vc: VcState, job: QueuedJob) -> bool:
    quota = vc.quota.get(job.shape.gpu_type, NO_RESOURCES)
    used = state.guaranteed_use[vc.name, job.shape.gpu_type]
    return (used + job.shape.total).fits_in(quota)


def _interactive_refusal(state: _Pass, vc: VcState, job: QueuedJob) -> str:
    if not job.interactive or vc.max_interactive_gpus is None:
        return ""
    held = state.interactive_gpus[vc.name]
    if held + job.shape.total.gpus <= vc.max_interactive_gpus:
        return ""
    return (
        f"VC {vc.name} allows {vc.max_interactive_gpus} interactive GPUs and "
        f"{held} are in use; this job needs {job.shape.total.gpus}"
    )


def _start_guaranteed(state: _Pass, queue: _VcQueue, job: QueuedJob) -> None:
    refusal = _interactive_refusal(state, queue.vc, job)
    if refusal:
        _wait(state, queue, job, refusal)
        return
    placement = state.place(job.shape)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=False)
        return
    victims = _choose_victims(state, job.shape)
    if victims is None:
        _wait(state, queue, job, state.cluster.explain_no_fit(job.shape))
        return
    # The job starts in a later pass, once the victims have let go; until then what it
    # will take is reserved, and the VC's quota counts it as placed.
    state.cluster.claim(job.shape, victims)
    for victim in victims:
        state.borrowers.remove(victim)
        state.decisions.preemptions.append(
            Preemption(
                victim.id,
                f"preempted so that job {job.id} of VC {queue.vc.name} gets its quota",
                for_job=job.id,
            )
        )
    state.guaranteed_use[queue.vc.name, job.shape.gpu_type] += job.shape.total
    if job.interactive:
        state.interactive_gpus[queue.vc.name] += job.shape.total.gpus
    count = f"{len(victims)} preempted job(s)" if victims else "the jobs being stopped"
    _wait(
        state,
        queue,
        job,
        f"starts once {count} have released their GPUs",
        blocks=queue.vc.policy == Policy.FIFO,
    )


def _choose_victims(state: _Pass, shape: JobShape) -> list[RunningJob] | None:
    """The fewest borrowers whose leaving lets the gang fit (with what jobs being stopped
    release), preferring the lowest priority and the most recently started; [] if those
    being stopped suffice; None if nothing would do."""
    if shape in state.no_victims:
        return None
    cluster = state.cluster
    reachable = (
        cluster.free_gpus(shape.gpu_type)
        + cluster.pending_gpus(shape.gpu_type)
        + state.borrowers.gpus[shape.gpu_type]
    )
    victims: list[RunningJob] | None = None
    if reachable >= shape.total.gpus:
        with cluster.pending_freed(shape.gpu_type):
            victims = [] if cluster.fits(shape) else _fewest_victims(state, shape)
    if victims is None:
        state.no_victims.add(shape)
    return victims


def _fewest_victims(state: _Pass, shape: JobShape) -> list[RunningJob] | None:
    """Count on each node how many workers fit in what is free there plus what victims
    hold: first one victim alone (in preemption order), else greedily the nodes whose
    victims give the most workers each; then keep back any victim not needed. The work
    is linear in the borrowers for each worker the job lacks, however many there are."""
    cluster, borrowers, per = state.cluster, state.borrowers, shape.per_worker

    def usable(node: FreeNode | None) -> bool:
        return (
            node is not None
            and node.state.schedulable
            and node.state.gpu_type == shape.gpu_type
            and per.fits_in(node.state.capacity)
            and node.matches(shape.node_selector)
        )

    def fitting(node: FreeNode, extra: list[int]) -> int:
        return workers_fitting(
            per,
            len(node.free_gpus) + extra[0],
            node.free_millicpus + extra[1],
            node.free_memory + extra[2],
        )

    need = shape.workers - sum(fitting(node, [0, 0, 0]) for node in cluster.eligible_nodes(shape))
    chosen: list[RunningJob] = []
    for victim in borrowers.by_type[shape.gpu_type].values():
        gain = 0
        for name, held in borrowers.held[victim.id].items():
            node = cluster.nodes.get(name)
            if usable(node):
                gain += fitting(node, held) - fitting(node, [0, 0, 0])
        if gain >= need:
            chosen = [victim]
            break
    else:
        chosen = _greedy_victims(state, shape, need, usable, fitting)
        if chosen is None:
            return None
    return _keep_back_unneeded(cluster, shape, chosen)


def _greedy_victims(
    state: _Pass,
    shape: JobShape,
    need: int,
    usable: Callable[[FreeNode | None], bool],
    fitting: _Fitting,
) -> list[RunningJob] | None:
    """Repeatedly the node (and the fewest of its victims, largest first) giving the most
    workers per victim, until the gang fits; each round gains a worker at least."""
    cluster, borrowers = state.cluster, state.borrowers
    extra: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    nodes = {
        name: cluster.nodes[name]
        for name, jobs in borrowers.on_node.items()
        if jobs and usable(cluster.nodes.get(name))
    }
    taken: set[str] = set()
    chosen: list[RunningJob] = []
    while need > 0:
        best: tuple | None = None
        for name, node in nodes.items():
            here = [
                job
                for job in borrowers.on_node[name].values()
                if job.id not in taken and job.shape.gpu_type == shape.gpu_type
            ]
            if not here:
                continue
            here.sort(key=lambda job: (-borrowers.held[job.id][name][0], preemption_order(job)))
            current = fitting(node, extra[name])
            amounts = list(extra[name])
            for count, job in enumerate(here, 1):
                held = borrowers.held[job.id][name]
                amounts = [mine + theirs for mine, theirs in zip(amounts, held, strict=True)]
                gain = fitting(node, amounts) - current
                if gain > 0:
                    score = (count / min(gain, need), count, preemption_order(here[0]), name)
                    if best is None or score < best[0]:
                        best = (score, here[:count])
        if best is None:
            return None
        for job in best[1]:
            taken.add(job.id)
            chosen.append(job)
            for name, held in borrowers.held[job.id].items():
                if name in nodes:
                    before = fitting(nodes[name], extra[name])
                    extra[name] = [
                        mine + theirs for mine, theirs in zip(extra[name], held, strict=True)
                    ]
                    need -= fitting(nodes[name], extra[name]) - before
    return chosen


def _keep_back_unneeded(
    cluster: ClusterState, shape: JobShape, chosen: list[RunningJob]
) -> list[RunningJob] | None:
    """Check that the gang fits once the victims are gone, and spare those it does not
    need, the most protected first."""
    for victim in chosen:
        cluster.release(victim.placement)
    try:
        if not cluster.fits(shape):
            return None
        for victim in sorted(chosen, key=preemption_order, reverse=True):
            if len(chosen) == 1:
                break
            cluster.occupy(victim.placement)
            if cluster.fits(shape):
                chosen.remove(victim)
            else:
                cluster.release(victim.placement)
        return sorted(chosen, key=preemption_order)
    finally:
        for victim in chosen:
            cluster.occupy(victim.placement)


# --- phase two: borrowing idle capacity ---------------------------------------------------


def _start_if_idle(state: _Pass, queue: _VcQueue, job: QueuedJob) -> None:
    if queue.blocker is not None:
        state.decisions.waits.append(
            Wait(job.id, f"waits behind job {queue.blocker.id}: {queue.blocker_reason}")
        )
        return
    refusal = _interactive_refusal(state, queue.vc, job)
    if refusal:
        _wait(state, queue, job, refusal)
        return
    guaranteed = not job.preemptible and _within_quota(state, queue.vc, job)
    placement = state.place(job.shape)
    if placement is not None:
        _record_start(state, queue.vc, job, placement, borrowing=not guaranteed)
        return
    reason = state.cluster.explain_no_fit(job.shape)
    if not guaranteed and not job.preemptible:
        quota = queue.vc.quota.get(job.shape.gpu_type, NO_RESOURCES)
        used = state.guaranteed_use[queue.vc.name, job.shape.gpu_type]
        reason = (
            f"beyond VC {queue.vc.name}'s {job.shape.gpu_type} quota "
            f"({used.gpus} of {quota.gpus} GPUs in use) and no idle capacity to borrow: " + reason
        )
    _wait(state, queue, job, reason)


# --- shared -------------------------------------------------------------------------------


def _record_start(
    state: _Pass, vc: VcState, job: QueuedJob, placement: tuple, borrowing: bool
) -> None:
    state.decisions.starts.append(Start(job.id, placement, borrowing=borrowing))
    if not (borrowing or job.preemptible):
        state.guaranteed_use[vc.name, job.shape.gpu_type] += job.shape.total
    if job.interactive:
        state.interactive_gpus[vc.name] += job.shape.total.gpus


def _wait(
    state: _Pass, queue: _VcQueue, job: QueuedJob, reason: str, blocks: bool | None = None
) -> None:
    """Leave the job waiting; under FIFO, or past the starvation guard, it blocks its VC."""
    state.decisions.waits.append(Wait(job.id, reason))
    if blocks is None:
        blocks = queue.vc.policy == Policy.FIFO or state.starved(job)
    if blocks and queue.blocker is None:
        queue.blocker = job
        policy = "FIFO" if queue.vc.policy == Policy.FIFO else "runnable first, starvation guard"
        queue.blocker_reason = f"first in VC {queue.vc.name}'s queue ({policy}): {reason}"
