"""Free resources of every node during a scheduling pass, and gang placement on them.

Schedulable nodes of each GPU type sit in buckets by their number of free GPUs, so that a
best-fit (or, for comparison, worst-fit) node is found without scanning the cluster, and
a job that cannot fit is refused in a few steps: a pass over 10,000 queued jobs on 1,000
nodes stays well under a second.

Resources held by jobs being stopped (releasing, or just chosen for preemption) are
*pending*: taken for every placement, but a guaranteed job may claim them, and what it
claims of free resources beside them is reserved until it starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jobmanager.core.no_fit import no_fit_reason
from jobmanager.core.snapshot import (
    JobShape,
    NodeState,
    Placement,
    Resources,
    RunningJob,
    WorkerPlacement,
)
from jobmanager.core.topology import gang_nodes, is_empty, whole_node_worker


@dataclass(slots=True)
class FreeNode:
    """A node with what is free on it now, and what jobs being stopped still hold."""

    state: NodeState
    free_gpus: list[int]  # device indices, sorted
    free_millicpus: int
    free_memory: int
    labels: dict[str, str] = field(default_factory=dict)
    pending_gpus: list[int] = field(default_factory=list)
    pending_millicpus: int = 0
    pending_memory: int = 0

    # What scheduling changes (each change assigns anew, never mutates in place).
    CHANGING: ClassVar[tuple[str, ...]] = (
        "free_gpus", "free_millicpus", "free_memory",
        "pending_gpus", "pending_millicpus", "pending_memory",
    )  # fmt: skip

    @property
    def name(self) -> str:
        return self.state.name

    def matches(self, selector: tuple[tuple[str, str], ...]) -> bool:
        if not selector:  # most jobs name no labels: no generator to start
            return True
        return all(self.labels.get(key) == value for key, value in selector)

    def admits(self, shape: JobShape) -> bool:
        """Whether the job's workers may go here: its labels, and the node's VC if any."""
        dedicated_to = self.state.dedicated_to
        return self.matches(shape.node_selector) and (
            not dedicated_to or dedicated_to in shape.pools
        )

    def fits(self, shape: JobShape) -> bool:
        per_worker = shape.per_worker
        if shape.takes_whole_nodes:
            return is_empty(self) and per_worker.fits_in(self.state.capacity) and self.admits(shape)
        return (
            len(self.free_gpus) >= per_worker.gpus
            and self.free_millicpus >= per_worker.millicpus
            and self.free_memory >= per_worker.memory
            and self.admits(shape)
        )

    def room_for(self, shape: JobShape) -> int:
        """How many of the gang's workers could go here now."""
        if not self.admits(shape) or not shape.per_worker.fits_in(self.state.capacity):
            return 0
        if shape.takes_whole_nodes:
            return 1 if is_empty(self) else 0
        return workers_fitting(
            shape.per_worker, len(self.free_gpus), self.free_millicpus, self.free_memory
        )

    def worker(self, shape: JobShape) -> WorkerPlacement:
        """A worker of the gang placed here (all of the node for whole nodes)."""
        if shape.takes_whole_nodes:
            return whole_node_worker(self)
        return WorkerPlacement(
            node=self.name,
            gpus=tuple(self.free_gpus[: shape.per_worker.gpus]),
            millicpus=shape.per_worker.millicpus,
            memory=shape.per_worker.memory,
        )


MOST_WORKERS = 1_000_000


def workers_fitting(per_worker: Resources, gpus: int, millicpus: int, memory: int) -> int:
    """How many workers of this size fit in these free resources (at most MOST_WORKERS)."""
    fitting = MOST_WORKERS
    need = per_worker.gpus
    if need > 0:
        fitting = min(fitting, gpus // need if gpus > 0 else 0)
    need = per_worker.millicpus
    if need > 0:
        fitting = min(fitting, millicpus // need if millicpus > 0 else 0)
    need = per_worker.memory
    if need > 0:
        fitting = min(fitting, memory // need if memory > 0 else 0)
    return fitting


class ClusterState:
    """Mutable free capacity, changed by placing and releasing workers."""

    def __init__(self, nodes: Iterable[NodeState], strategy: Placement = Placement.PACK) -> None:
        self.strategy = strategy
        self.nodes: dict[str, FreeNode] = {}
        # GPU type -> free GPU count -> schedulable nodes with that many free (insertion order)
        self.buckets: dict[str, list[dict[str, FreeNode]]] = {}
        self.capacity_gpus: dict[str, int] = {}  # largest schedulable node of each type
        self._pending: dict[str, set[str]] = {}  # GPU type -> nodes with pending resources
        self.version = 0  # changes whenever free capacity does
        self._explained: dict[JobShape, tuple[int, str]] = {}
        # Schedulable nodes of a shape's type, capacity and labels, in order of name
        # (jobmanager.core.reservations; nodes' states and labels never change here).
        self.eligible_nodes: dict[JobShape, list[FreeNode]] = {}
        # While a trial runs: each node's state before the trial first changed it.
        self._journal: dict[str, tuple[Any, ...]] | None = None
        self.has_dedicated = False  # some node is bound to a VC
        self.has_switches = False  # some node's switch is known (jobmanager.core.topology)
        for node in sorted(nodes, key=lambda node: node.name):
            free = FreeNode(
                state=node,
                free_gpus=list(range(node.capacity.gpus)),
                free_millicpus=node.capacity.millicpus,
                free_memory=node.capacity.memory,
                labels=dict(node.labels),
            )
            self.nodes[node.name] = free
            self.has_dedicated = self.has_dedicated or bool(node.dedicated_to)
            self.has_switches = self.has_switches or bool(node.switch)
            if node.schedulable:
                largest = max(self.capacity_gpus.get(node.gpu_type, 0), node.capacity.gpus)
                self.capacity_gpus[node.gpu_type] = largest
        for gpu_type, largest in self.capacity_gpus.items():
            self.buckets[gpu_type] = [{} for _ in range(largest + 1)]
        for free in self.nodes.values():
            self._file(free)

    @classmethod
    def of(
        cls,
        nodes: Iterable[NodeState],
        running: Iterable[RunningJob],
        strategy: Placement = Placement.PACK,
    ) -> ClusterState:
        """The cluster with every running job's resources taken; those of releasing jobs
        are pending."""
        cluster = cls(nodes, strategy)
        taken: dict[str, tuple[set[int], list[int]]] = {}  # node -> GPUs, [CPU, memory]
        for job in running:
            for worker in job.placement:
                gpus, amounts = taken.setdefault(worker.node, (set(), [0, 0]))
                gpus.update(worker.gpus)
                amounts[0] += worker.millicpus
                amounts[1] += worker.memory
            if job.releasing:
                cluster.hold_pending(job.placement)
        for name, (gpus, (millicpus, memory)) in taken.items():
            free = cluster.nodes.get(name)
            if free is None:
                continue  # removed from the inventory
            cluster._unfile(free)
            free.free_gpus = [gpu for gpu in free.free_gpus if gpu not in gpus]
            free.free_millicpus -= millicpus
            free.free_memory -= memory
            cluster._file(free)
        return cluster

    # --- trials ----------------------------------------------------------------------------

    @contextmanager
    def trial(self) -> Iterator[ClusterState]:
        """Changes made inside are undone on leaving, so that one state kept up to date
        between scheduling passes (as a simulation does) serves each pass without being
        rebuilt from every running job."""
        if self._journal is not None:
            raise RuntimeError("a trial is already running")
        self._journal = {}
        pending = {gpu_type: set(names) for gpu_type, names in self._pending.items()}
        try:
            yield self
        finally:
            journal, self._journal = self._journal, None
            for name, saved in journal.items():
                node = self.nodes[name]
                self._unfile(node)
                for attribute, value in zip(FreeNode.CHANGING, saved, strict=True):
                    setattr(node, attribute, value)
                self._file(node)
            self._pending = pending
            self.version += 1

    def _touch(self, node: FreeNode) -> None:
        """Note the node's state before its first change in a trial."""
        if self._journal is not None and node.name not in self._journal:
            self._journal[node.name] = tuple(getattr(node, name) for name in FreeNode.CHANGING)

    def free_by_node(self) -> dict[str, tuple[tuple[int, ...], int, int]]:
        """Each node's free GPUs, millicores and MiB (to compare states)."""
        return {
            name: (tuple(node.free_gpus), node.free_millicpus, node.free_memory)
            for name, node in self.nodes.items()
        }

    # --- bookkeeping -----------------------------------------------------------------------

    def _file(self, free: FreeNode) -> None:
        if free.state.schedulable:
            self.buckets[free.state.gpu_type][len(free.free_gpus)][free.name] = free

    def _unfile(self, free: FreeNode) -> None:
        if free.state.schedulable:
            self.buckets[free.state.gpu_type][len(free.free_gpus)].pop(free.name, None)

    def occupy(self, placement: Iterable[WorkerPlacement]) -> None:
        """Take exactly these GPUs, CPU and memory (a running job's placement).

        A node the snapshot does not know (removed from the inventory) is skipped.
        """
        self.version += 1
        for worker in placement:
            free = self.nodes.get(worker.node)
            if free is None:
                continue
            self._touch(free)
            self._unfile(free)
            taken = set(worker.gpus)
            free.free_gpus = [gpu for gpu in free.free_gpus if gpu not in taken]
            free.free_millicpus -= worker.millicpus
            free.free_memory -= worker.memory
            self._file(free)

    def release(self, placement: Iterable[WorkerPlacement]) -> None:
        self.version += 1
        for worker in placement:
            free = self.nodes.get(worker.node)
            if free is None:
                continue
            self._touch(free)
            self._unfile(free)
            free.free_gpus = sorted({*free.free_gpus, *worker.gpus})
            free.free_millicpus += worker.millicpus
            free.free_memory += worker.memory
            self._file(free)

    # --- placing ---------------------------------------------------------------------------

    def place(self, shape: JobShape) -> tuple[WorkerPlacement, ...] | None:
        """Place every worker of a gang and take its resources, or take nothing."""
        if not self._may_fit(shape):
            return None
        within = None  # the nodes the network topology leaves it
        if shape.workers > 1 and (self.has_switches or shape.same_switch):
            within = gang_nodes(self, shape)
            if within is None:
                return None
        placed: list[WorkerPlacement] = []
        for _ in range(shape.workers):
            node = self._choose_node(shape, within)
            if node is None:
                self.release(placed)
                return None
            worker = node.worker(shape)
            self.occupy([worker])
            placed.append(worker)
        return tuple(placed)

    def take(self, placement: tuple[WorkerPlacement, ...]) -> bool:
        """Take exactly these resources if every one is free now; else take nothing."""
        needs: dict[str, tuple[set[int], int, int]] = {}
        for worker in placement:
            gpus, millicpus, memory = needs.get(worker.node, (set(), 0, 0))
            needs[worker.node] = (
                gpus | set(worker.gpus),
                millicpus + worker.millicpus,
                memory + worker.memory,
            )
        for name, (gpus, millicpus, memory) in needs.items():
            node = self.nodes.get(name)
            if (
                node is None
                or not node.state.schedulable
                or not gpus <= set(node.free_gpus)
                or millicpus > node.free_millicpus
                or memory > node.free_memory
            ):
                return False
        self.occupy(placement)
        return True

    def fits(self, shape: JobShape) -> bool:
        """Whether the gang could be placed now; changes nothing."""
        placed = self.place(shape)
        if placed is None:
            return False
        self.release(placed)
        return True

    def _may_fit(self, shape: JobShape) -> bool:
        """A quick upper bound from GPU counts alone."""
        buckets = self.buckets.get(shape.gpu_type)
        if buckets is None:
            return False
        needed = shape.per_worker.gpus
        if needed > len(buckets) - 1:
            return False
        if needed == 0:
            return any(buckets[count] for count in range(len(buckets)))
        slots = 0
        for count in range(len(buckets) - 1, needed - 1, -1):
            slots += len(buckets[count]) * (count // needed)
            if slots >= shape.workers:
                return True
        return False

    def _choose_node(self, shape: JobShape, within: frozenset[str] | None) -> FreeNode | None:
        buckets = self.buckets[shape.gpu_type]
        needed = shape.per_worker.gpus
        ascending = range(needed, len(buckets))
        spread = self.strategy == Placement.SPREAD
        counts: Iterable[int] = reversed(ascending) if spread else ascending
        if needed == 0:
            return self._choose_cpu_node(shape, buckets, within)
        # Among nodes with as many free GPUs, by name: the choice depends on free capacity
        # alone, not on the order in which nodes came to have it.
        for count in counts:
            bucket = buckets[count]
            for name in sorted(bucket) if len(bucket) > 1 else bucket:
                if (within is None or name in within) and bucket[name].fits(shape):
                    return bucket[name]
        return None

    def _choose_cpu_node(
        self,
        shape: JobShape,
        buckets: list[dict[str, FreeNode]],
        within: frozenset[str] | None,
    ) -> FreeNode | None:
        """CPU-only workers: the node with the least free CPU that fits (most, to spread)."""
        fitting = [
            node
            for bucket in buckets
            for node in bucket.values()
            if (within is None or node.name in within) and node.fits(shape)
        ]
        if not fitting:
            return None
        spread = self.strategy == Placement.SPREAD
        if spread:
            return min(fitting, key=lambda node: (-node.free_millicpus, node.name))
        return min(fitting, key=lambda node: (node.free_millicpus, node.name))

    def nodes_with_room(self, shape: JobShape) -> list[FreeNode]:
        """Schedulable nodes of the job's GPU type and labels that have the GPUs for a
        worker free, or that jobs being stopped hold resources on: the only ones where a
        worker may fit without preempting anything."""
        buckets = self.buckets.get(shape.gpu_type, [])
        found = {
            node.name: node
            for bucket in buckets[shape.per_worker.gpus :]
            for node in bucket.values()
        }
        for name in self._pending.get(shape.gpu_type, ()):
            found[name] = self.nodes[name]
        return [
            found[name]
            for name in sorted(found)
            if shape.per_worker.fits_in(found[name].state.capacity) and found[name].admits(shape)
        ]

    # --- jobs being stopped ----------------------------------------------------------------

    def hold_pending(self, placement: Iterable[WorkerPlacement]) -> None:
        """Mark a job's (already taken) resources as about to come free."""
        for worker in placement:
            node = self.nodes.get(worker.node)
            if node is None or not node.state.schedulable:
                continue
            self._touch(node)
            node.pending_gpus = sorted({*node.pending_gpus, *worker.gpus})
            node.pending_millicpus += worker.millicpus
            node.pending_memory += worker.memory
            self._pending.setdefault(node.state.gpu_type, set()).add(node.name)

    def pending_gpus(self, gpu_type: str) -> int:
        return sum(len(self.nodes[name].pending_gpus) for name in self._pending.get(gpu_type, ()))

    def _move_pending(self, node: FreeNode, to_free: bool) -> None:
        self.version += 1
        self._touch(node)
        self._unfile(node)
        sign = 1 if to_free else -1
        if to_free:
            # Pending GPUs first, so that a claim takes them before free ones.
            node.free_gpus = node.pending_gpus + node.free_gpus
        else:
            pending = set(node.pending_gpus)
            node.free_gpus = sorted(gpu for gpu in node.free_gpus if gpu not in pending)
        node.free_millicpus += sign * node.pending_millicpus
        node.free_memory += sign * node.pending_memory
        self._file(node)

    def claim(
        self,
        shape: JobShape,
        victims: Iterable[RunningJob],
        exactly: tuple[WorkerPlacement, ...] = (),
    ) -> tuple[WorkerPlacement, ...] | None:
        """Reserve a place for the gang (``exactly`` this one, if given) in free resources,
        pending ones and those of the victims (pending from now on).

        What the gang would take of free resources is taken now, so that nobody else gets
        it before the gang starts; the rest of the pending resources stays claimable.
        """
        for victim in victims:
            self.hold_pending(victim.placement)
        # Only where a worker would fit once the pending resources are free does moving
        # them (in and out of the buckets) matter.
        per_worker = shape.per_worker
        nodes = [
            node
            for node in (self.nodes[name] for name in sorted(self._pending.get(shape.gpu_type, ())))
            if workers_fitting(
                per_worker,
                len(node.free_gpus) + len(node.pending_gpus),
                node.free_millicpus + node.pending_millicpus,
                node.free_memory + node.pending_memory,
            )
            and node.admits(shape)
        ]
        for node in nodes:
            self._move_pending(node, to_free=True)
        if not exactly:
            placement = self.place(shape)
        elif self.take(exactly):
            placement = exactly
        else:
            placement = None
        claimed: dict[str, tuple[set[int], int, int]] = {}
        for worker in placement or ():
            gpus, millicpus, memory = claimed.get(worker.node, (set(), 0, 0))
            claimed[worker.node] = (
                gpus | set(worker.gpus),
                millicpus + worker.millicpus,
                memory + worker.memory,
            )
        for node in nodes:
            gpus, millicpus, memory = claimed.get(node.name, (set(), 0, 0))
            # What the gang does not take of pending resources stays pending (and taken).
            node.pending_gpus = [gpu for gpu in node.pending_gpus if gpu not in gpus]
            node.pending_millicpus = max(0, node.pending_millicpus - millicpus)
            node.pending_memory = max(0, node.pending_memory - memory)
            self._move_pending(node, to_free=False)
            if not (node.pending_gpus or node.pending_millicpus or node.pending_memory):
                self._pending[shape.gpu_type].discard(node.name)
        return placement

    # --- explaining ------------------------------------------------------------------------

    def largest_free_block(self, gpu_type: str) -> int:
        buckets = self.buckets.get(gpu_type, [])
        return next((count for count in range(len(buckets) - 1, -1, -1) if buckets[count]), 0)

    def free_gpus(self, gpu_type: str) -> int:
        buckets = self.buckets.get(gpu_type, [])
        return sum(count * len(bucket) for count, bucket in enumerate(buckets))

    def explain_no_fit(self, shape: JobShape) -> str:
        """Why the gang cannot be placed now, in words a user understands."""
        cached = self._explained.get(shape)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        reason = no_fit_reason(self, shape)
        self._explained[shape] = (self.version, reason)
        return reason
