"""Choosing victims: the fewest borrowers whose leaving makes room for a guaranteed job.

Workers of a gang are alike and each node's room for them depends on that node alone, so
a gang fits exactly when the workers that fit on each node add up to its size. The search
counts rather than places: first one victim alone (in preemption order), else greedily the
nodes whose victims give the most workers each, then it spares any victim not needed. It
looks at every borrower once or twice, then only at the nodes of the victims it takes, so
thousands of borrowers or a gang of a thousand workers take a fraction of a second.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from jobmanager.core.placement import ClusterState, FreeNode, workers_fitting
from jobmanager.core.snapshot import JobShape, QueuedJob, RunningJob
from jobmanager.core.topology import nodes_by_switch

# GPUs, millicpus and memory, as tuples that are added up element by element.
Amounts = tuple[int, ...]
_NOTHING: Amounts = (0, 0, 0)


def preemption_order(job: RunningJob, now: float | None = None) -> tuple[Any, ...]:
    """The first victims: lowest priority, then the least work lost: the most recently
    started, or (given ``now``) the most recently checkpointed."""
    saved = job.started_at if now is None else job.last_checkpoint(now)
    return (job.priority, -saved, job.id)


def ahead_in_its_queue(running: RunningJob, job: QueuedJob) -> bool:
    """Whether a running borrower (not one its user made preemptible), requeued, would
    come before the queued job in their VC's queue. A job does not preempt such jobs of
    its own VC: they would come back ahead of it, hold it back (FIFO), start again first
    and be preempted again, for ever."""
    return (
        running.vc == job.vc
        and not running.preemptible
        and (-running.priority, running.queue_position) <= (-job.priority, job.queued_at)
    )


class Borrowers:
    """Running jobs that guaranteed work may preempt, in preemption order, by GPU type and
    by node, with what each holds on each node."""

    by_type: dict[str, dict[str, RunningJob]]
    on_node: dict[str, dict[str, RunningJob]]
    held: dict[str, dict[str, Amounts]]
    gpus: dict[str, int]
    of_vc: dict[str, int]

    def __init__(self, jobs: Iterable[RunningJob], now: float | None = None) -> None:
        self.now = now
        # Indexed when first read: most passes never look for a victim, and a replay with
        # every job preemptible spent a seventh of its time indexing them at each pass.
        self._jobs: list[RunningJob] | None = list(jobs)

    def __getattr__(self, name: str) -> Any:
        jobs = self.__dict__.get("_jobs")
        if name.startswith("_") or jobs is None:
            raise AttributeError(name)
        self._jobs = None
        self._index(jobs)
        return getattr(self, name)

    def _index(self, jobs: list[RunningJob]) -> None:
        self.by_type = defaultdict(dict)
        self.on_node = defaultdict(dict)
        self.held = {}  # job -> node -> amounts
        self.gpus = defaultdict(int)
        self.of_vc = defaultdict(int)  # how many each VC has
        for job in sorted(jobs, key=self.order):
            self.by_type[job.shape.gpu_type][job.id] = job
            self.gpus[job.shape.gpu_type] += job.shape.total.gpus
            self.of_vc[job.vc] += 1
            held: dict[str, Amounts] = {}
            for worker in job.placement:
                self.on_node[worker.node][job.id] = job
                gpus, millicpus, memory = held.get(worker.node, _NOTHING)
                held[worker.node] = (
                    gpus + len(worker.gpus),
                    millicpus + worker.millicpus,
                    memory + worker.memory,
                )
            self.held[job.id] = held

    def order(self, job: RunningJob) -> tuple[Any, ...]:
        return preemption_order(job, self.now)

    def drop(self, job: RunningJob) -> None:
        """Take a victim out, if it is one of these: before they are indexed, from the
        list (so that a preemption does not index every pool of the pass)."""
        jobs = self.__dict__.get("_jobs")
        if jobs is not None:
            self._jobs = [held for held in jobs if held.id != job.id]
        elif job.id in self.held:
            self.remove(job)

    def remove(self, job: RunningJob) -> None:
        del self.by_type[job.shape.gpu_type][job.id]
        self.gpus[job.shape.gpu_type] -= job.shape.total.gpus
        self.of_vc[job.vc] -= 1
        for node in self.held[job.id]:
            self.on_node[node].pop(job.id, None)


class _Room:
    """Workers of one shape that fit on each node, counting its free resources, those of
    jobs being stopped, and those of the victims chosen so far."""

    def __init__(
        self, cluster: ClusterState, shape: JobShape, within: frozenset[str] | None = None
    ) -> None:
        self.cluster = cluster
        self.shape = shape
        self.extra: dict[str, Amounts] = {}
        self.within = within  # the only nodes looked at (one switch's), if given

    def usable(self, name: str) -> FreeNode | None:
        node = self.cluster.nodes.get(name)
        shape = self.shape
        if (
            node is None
            or (self.within is not None and name not in self.within)
            or not node.state.schedulable
            or node.state.gpu_type != shape.gpu_type
            or not shape.per_worker.fits_in(node.state.capacity)
            or not node.admits(shape)
        ):
            return None
        return node

    def on(self, node: FreeNode, more: Amounts = _NOTHING) -> int:
        extra = self.extra.get(node.name, _NOTHING)
        gpus = len(node.free_gpus) + len(node.pending_gpus) + extra[0] + more[0]
        millicpus = node.free_millicpus + node.pending_millicpus + extra[1] + more[1]
        memory = node.free_memory + node.pending_memory + extra[2] + more[2]
        if self.shape.takes_whole_nodes:
            capacity = node.state.capacity
            return int(
                (gpus, millicpus, memory) == (capacity.gpus, capacity.millicpus, capacity.memory)
            )
        return workers_fitting(self.shape.per_worker, gpus, millicpus, memory)

    def gain(self, victim_held: dict[str, Amounts]) -> int:
        """How many more workers fit if a victim holding this (by node) left."""
        gained = 0
        for name, held in victim_held.items():
            node = self.usable(name)
            if node is not None:
                gained += self.on(node, held) - self.on(node)
        return gained

    def loss(self, victim_held: dict[str, Amounts]) -> int:
        """How many fewer workers fit if a chosen victim holding this stayed."""
        lost = 0
        for name, held in victim_held.items():
            node = self.usable(name)
            if node is not None:
                lost += self.on(node) - self.on(node, tuple(-amount for amount in held))
        return lost

    def add(self, victim_held: dict[str, Amounts], sign: int = 1) -> None:
        """Count a victim's resources as free (sign -1: no longer)."""
        for name, held in victim_held.items():
            extra = self.extra.get(name, _NOTHING)
            self.extra[name] = tuple(
                mine + sign * theirs for mine, theirs in zip(extra, held, strict=True)
            )


def fewest_victims(
    cluster: ClusterState, borrowers: Borrowers, job: QueuedJob
) -> list[RunningJob] | None:
    """The fewest borrowers whose leaving lets the gang fit (with what jobs being stopped
    release), preferring the lowest priority and the most recently started; [] if those
    being stopped suffice; None if nothing would do. A gang that needs one network switch
    takes its victims under one (the switch that needs the fewest)."""
    if not job.shape.needs_one_switch:
        return _fewest_victims(cluster, borrowers, job)
    best: list[RunningJob] | None = None
    for within in nodes_by_switch(cluster, job.shape).values():
        victims = _fewest_victims(cluster, borrowers, job, within)
        if victims is not None and (best is None or len(victims) < len(best)):
            best = victims
            if not best:
                break
    return best


def _fewest_victims(
    cluster: ClusterState,
    borrowers: Borrowers,
    job: QueuedJob,
    within: frozenset[str] | None = None,
) -> list[RunningJob] | None:
    shape = job.shape
    gpu_type = shape.gpu_type
    reachable = (
        cluster.free_gpus(gpu_type) + cluster.pending_gpus(gpu_type) + borrowers.gpus[gpu_type]
    )
    if reachable < shape.total.gpus:
        return None
    room = _Room(cluster, shape, within)
    need = shape.workers - sum(
        room.on(node)
        for node in cluster.nodes_with_room(shape)
        if within is None or node.name in within
    )
    if need <= 0:
        return []
    for victim in borrowers.by_type[gpu_type].values():
        if not ahead_in_its_queue(victim, job) and room.gain(borrowers.held[victim.id]) >= need:
            return [victim]
    chosen, need = _greedy(room, borrowers, job, need)
    if need > 0:
        return None
    # Spare the victims not needed after all, the most protected first.
    surplus = -need
    for victim in sorted(chosen, key=borrowers.order, reverse=True):
        loss = room.loss(borrowers.held[victim.id])
        if loss <= surplus:
            chosen.remove(victim)
            room.add(borrowers.held[victim.id], sign=-1)
            surplus -= loss
    return sorted(chosen, key=borrowers.order)


def _greedy(
    room: _Room, borrowers: Borrowers, job: QueuedJob, need: int
) -> tuple[list[RunningJob], int]:
    """Repeatedly the node (and the fewest of its victims, largest first) giving the most
    workers per victim, until the gang fits, or no victim is left; the victims and how
    many workers are still lacking. Each round gains a worker at least, and only the nodes
    its victims held are looked at again."""
    nodes = {name: node for name in borrowers.on_node if (node := room.usable(name))}
    taken: set[str] = set()
    options = {
        name: _options(room, borrowers, job, name, node, taken) for name, node in nodes.items()
    }
    chosen: list[RunningJob] = []
    while need > 0:
        best: tuple[Any, ...] | None = None
        for name, (here, prefixes) in options.items():
            for count, gain in prefixes:
                useful = min(gain, need)
                # Fewest victims per worker gained; then the most workers in one go.
                score = (count / useful, -useful, borrowers.order(here[0]), name)
                if best is None or score < best[0]:
                    best = (score, here[:count])
        if best is None:
            break
        touched: set[str] = set()
        for victim in best[1]:
            taken.add(victim.id)
            chosen.append(victim)
            need -= room.gain(borrowers.held[victim.id])
            room.add(borrowers.held[victim.id])
            touched.update(borrowers.held[victim.id])
        for name in touched & nodes.keys():
            options[name] = _options(room, borrowers, job, name, nodes[name], taken)
    return chosen, need


def _options(
    room: _Room, borrowers: Borrowers, job: QueuedJob, name: str, node: FreeNode, taken: set[str]
) -> tuple[list[RunningJob], list[tuple[int, int]]]:
    """A node's victims, largest here first (so that a prefix frees the most with the
    fewest), and for each prefix that gains workers: how many victims, how many workers."""
    here = [
        victim
        for victim in borrowers.on_node[name].values()
        if victim.id not in taken
        and victim.shape.gpu_type == job.shape.gpu_type
        and not ahead_in_its_queue(victim, job)
    ]
    here.sort(key=lambda victim: (-borrowers.held[victim.id][name][0], *borrowers.order(victim)))
    current = room.on(node)
    amounts = _NOTHING
    prefixes = []
    for count, victim in enumerate(here, 1):
        held = borrowers.held[victim.id][name]
        amounts = tuple(mine + theirs for mine, theirs in zip(amounts, held, strict=True))
        gain = room.on(node, amounts) - current
        if gain > 0:
            prefixes.append((count, gain))
    return here, prefixes
