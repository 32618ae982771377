"""Free resources of every node during a scheduling pass, and gang placement on them.

Schedulable nodes of each GPU type sit in buckets by their number of free GPUs, so that a
best-fit (or, for comparison, worst-fit) node is found without scanning the cluster, and
a job that cannot fit is refused in a few steps: a pass over 10,000 queued jobs on 1,000
nodes stays well under a second.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from jobmanager.core.snapshot import (
    JobShape,
    NodeState,
    Placement,
    Resources,
    RunningJob,
    WorkerPlacement,
)


@dataclass(slots=True)
class FreeNode:
    """A node with what is free on it now."""

    state: NodeState
    free_gpus: list[int]  # device indices, sorted
    free_millicpus: int
    free_memory: int
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.state.name

    def fits(self, per_worker: Resources, selector: tuple[tuple[str, str], ...]) -> bool:
        return (
            len(self.free_gpus) >= per_worker.gpus
            and self.free_millicpus >= per_worker.millicpus
            and self.free_memory >= per_worker.memory
            and all(self.labels.get(key) == value for key, value in selector)
        )


class ClusterState:
    """Mutable free capacity, changed by placing and releasing workers."""

    def __init__(self, nodes: Iterable[NodeState], strategy: Placement = Placement.PACK) -> None:
        self.strategy = strategy
        self.nodes: dict[str, FreeNode] = {}
        # GPU type -> free GPU count -> schedulable nodes with that many free (insertion order)
        self._buckets: dict[str, list[dict[str, FreeNode]]] = {}
        self.capacity_gpus: dict[str, int] = {}  # largest node of each type
        for node in sorted(nodes, key=lambda node: node.name):
            free = FreeNode(
                state=node,
                free_gpus=list(range(node.capacity.gpus)),
                free_millicpus=node.capacity.millicpus,
                free_memory=node.capacity.memory,
                labels=dict(node.labels),
            )
            self.nodes[node.name] = free
            largest = max(self.capacity_gpus.get(node.gpu_type, 0), node.capacity.gpus)
            self.capacity_gpus[node.gpu_type] = largest
        for gpu_type, largest in self.capacity_gpus.items():
            self._buckets[gpu_type] = [{} for _ in range(largest + 1)]
        for free in self.nodes.values():
            self._file(free)

    @classmethod
    def of(
        cls,
        nodes: Iterable[NodeState],
        running: Iterable[RunningJob],
        strategy: Placement = Placement.PACK,
    ) -> ClusterState:
        cluster = cls(nodes, strategy)
        for job in running:
            cluster.occupy(job.placement)
        return cluster

    # --- bookkeeping -----------------------------------------------------------------------

    def _file(self, free: FreeNode) -> None:
        if free.state.schedulable:
            self._buckets[free.state.gpu_type][len(free.free_gpus)][free.name] = free

    def _unfile(self, free: FreeNode) -> None:
        if free.state.schedulable:
            self._buckets[free.state.gpu_type][len(free.free_gpus)].pop(free.name, None)

    def occupy(self, placement: Iterable[WorkerPlacement]) -> None:
        """Take exactly these GPUs, CPU and memory (a running job's placement).

        A node the snapshot does not know (removed from the inventory) is skipped.
        """
        for worker in placement:
            free = self.nodes.get(worker.node)
            if free is None:
                continue
            self._unfile(free)
            taken = set(worker.gpus)
            free.free_gpus = [gpu for gpu in free.free_gpus if gpu not in taken]
            free.free_millicpus -= worker.millicpus
            free.free_memory -= worker.memory
            self._file(free)

    def release(self, placement: Iterable[WorkerPlacement]) -> None:
        for worker in placement:
            free = self.nodes.get(worker.node)
            if free is None:
                continue
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
        placed: list[WorkerPlacement] = []
        for _ in range(shape.workers):
            node = self._choose_node(shape)
            if node is None:
                self.release(placed)
                return None
            worker = WorkerPlacement(
                node=node.name,
                gpus=tuple(node.free_gpus[: shape.per_worker.gpus]),
                millicpus=shape.per_worker.millicpus,
                memory=shape.per_worker.memory,
            )
            self.occupy([worker])
            placed.append(worker)
        return tuple(placed)

    def fits(self, shape: JobShape) -> bool:
        """Whether the gang could be placed now; changes nothing."""
        placed = self.place(shape)
        if placed is None:
            return False
        self.release(placed)
        return True

    @contextmanager
    def what_if(self) -> Iterator[list[tuple[str, tuple[WorkerPlacement, ...]]]]:
        """Releases and placements made through the yielded log are undone on exit."""
        log: list[tuple[str, tuple[WorkerPlacement, ...]]] = []
        try:
            yield log
        finally:
            for action, placement in reversed(log):
                if action == "release":
                    self.occupy(placement)
                else:
                    self.release(placement)

    def _may_fit(self, shape: JobShape) -> bool:
        """A quick upper bound from GPU counts alone."""
        buckets = self._buckets.get(shape.gpu_type)
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

    def _choose_node(self, shape: JobShape) -> FreeNode | None:
        buckets = self._buckets[shape.gpu_type]
        needed = shape.per_worker.gpus
        counts = range(needed, len(buckets))
        if self.strategy == Placement.SPREAD:
            counts = reversed(counts)
        if needed == 0:
            return self._choose_cpu_node(shape, buckets)
        for count in counts:
            for node in buckets[count].values():
                if node.fits(shape.per_worker, shape.node_selector):
                    return node
        return None

    def _choose_cpu_node(
        self, shape: JobShape, buckets: list[dict[str, FreeNode]]
    ) -> FreeNode | None:
        """CPU-only workers: the node with the least free CPU that fits (most, to spread)."""
        fitting = [
            node
            for bucket in buckets
            for node in bucket.values()
            if node.fits(shape.per_worker, shape.node_selector)
        ]
        if not fitting:
            return None
        spread = self.strategy == Placement.SPREAD
        return (max if spread else min)(fitting, key=lambda node: node.free_millicpus)

    # --- explaining ------------------------------------------------------------------------

    def largest_free_block(self, gpu_type: str) -> int:
        buckets = self._buckets.get(gpu_type, [])
        return next((count for count in range(len(buckets) - 1, -1, -1) if buckets[count]), 0)

    def free_gpus(self, gpu_type: str) -> int:
        buckets = self._buckets.get(gpu_type, [])
        return sum(count * len(bucket) for count, bucket in enumerate(buckets))

    def explain_no_fit(self, shape: JobShape) -> str:
        """Why the gang cannot be placed now, in words a user understands."""
        per_worker = shape.per_worker
        if shape.gpu_type not in self._buckets:
            return f"no schedulable node has GPU type {shape.gpu_type}"
        workers = f"{shape.workers} x " if shape.workers > 1 else ""
        if per_worker.gpus == 0:
            most_cpu = max(
                (
                    node.free_millicpus
                    for bucket in self._buckets[shape.gpu_type]
                    for node in bucket.values()
                ),
                default=0,
            )
            return (
                f"needs {workers}{per_worker.millicpus / 1000:g} CPUs and "
                f"{per_worker.memory} MiB on {shape.gpu_type} nodes; "
                f"most free CPUs on one node: {most_cpu / 1000:g}"
            )
        separate = (
            " on separate nodes"
            if shape.workers > 1 and 2 * per_worker.gpus > self.capacity_gpus[shape.gpu_type]
            else ""
        )
        largest = self.largest_free_block(shape.gpu_type)
        reason = (
            f"needs {workers}{per_worker.gpus} {shape.gpu_type}{separate}; "
            f"largest free block is {largest}"
        )
        if largest >= per_worker.gpus:
            blocks = sum(
                len(bucket) * (count // per_worker.gpus)
                for count, bucket in enumerate(self._buckets[shape.gpu_type])
                if count >= per_worker.gpus
            )
            if blocks < shape.workers:
                reason += f", and only {blocks} such block{'s' if blocks != 1 else ''} are free"
            else:
                reason += " but the CPU, memory or node labels it asks for are not free there"
        return reason
