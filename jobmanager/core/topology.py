"""Where a gang's workers go in the network, and whole nodes for distributed jobs.

Network topology (DLTS's InfiniBand-aware scheduling, Kueue's topology-aware scheduling):
each node may name the switch it hangs under (NodeState.switch). A gang of more than one
worker goes under one switch where one has room for all its workers, the one with the
least room that has enough (so that emptier switches stay whole for bigger gangs; the
most room under SPREAD). Where none has, it is spread over as few switches as possible,
those with the most room first, unless it requires one switch (JobShape.same_switch):
then it waits. A node whose switch is not known counts as a switch of its own.

Whole nodes (DLTS's "force entire node allocation"): each worker of a gang of more than
one worker that asks for them (JobShape.whole_nodes) goes to a node with nothing on it
and takes all of it (every GPU, CPU and MiB), so that no other job shares its nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobmanager.core.snapshot import JobShape, Placement, WorkerPlacement

if TYPE_CHECKING:
    from jobmanager.core.placement import ClusterState, FreeNode

SwitchKey = tuple[str, str]  # (switch, "") or ("", node) for a node of unknown switch


def switch_key(node: FreeNode) -> SwitchKey:
    return (node.state.switch, "") if node.state.switch else ("", node.name)


def is_empty(node: FreeNode) -> bool:
    """Nothing is held on the node, nor being released there."""
    capacity = node.state.capacity
    return (
        len(node.free_gpus) == capacity.gpus
        and node.free_millicpus == capacity.millicpus
        and node.free_memory == capacity.memory
    )


def whole_node_worker(node: FreeNode) -> WorkerPlacement:
    capacity = node.state.capacity
    return WorkerPlacement(node.name, tuple(node.free_gpus), capacity.millicpus, capacity.memory)


def nodes_by_switch(cluster: ClusterState, shape: JobShape) -> dict[SwitchKey, frozenset[str]]:
    """The names of the schedulable nodes of the gang's GPU type, by switch."""
    found: dict[SwitchKey, set[str]] = {}
    for node in cluster.nodes.values():
        if node.state.schedulable and node.state.gpu_type == shape.gpu_type:
            found.setdefault(switch_key(node), set()).add(node.name)
    return {key: frozenset(names) for key, names in sorted(found.items())}


def room_by_switch(cluster: ClusterState, shape: JobShape) -> dict[SwitchKey, list[FreeNode]]:
    """Schedulable nodes of the gang's GPU type where a worker fits now, by switch."""
    found: dict[SwitchKey, list[FreeNode]] = {}
    for bucket in cluster.buckets.get(shape.gpu_type, [])[shape.per_worker.gpus :]:
        for node in bucket.values():
            if node.room_for(shape):
                found.setdefault(switch_key(node), []).append(node)
    return found


def gang_nodes(cluster: ClusterState, shape: JobShape) -> frozenset[str] | None:
    """The nodes to place the gang on: under one switch if one has room for it all, else
    under as few as possible (None: it does not fit, or needs one switch and none has
    room)."""
    by_switch = room_by_switch(cluster, shape)
    room = {key: sum(node.room_for(shape) for node in nodes) for key, nodes in by_switch.items()}
    enough = [key for key, count in room.items() if count >= shape.workers]
    if enough:
        sign = -1 if cluster.strategy == Placement.SPREAD else 1
        best = min(enough, key=lambda key: (sign * room[key], key))
        return frozenset(node.name for node in by_switch[best])
    if shape.needs_one_switch:
        return None
    chosen: list[str] = []
    total = 0
    for key in sorted(room, key=lambda key: (-room[key], key)):
        chosen.extend(node.name for node in by_switch[key])
        total += room[key]
        if total >= shape.workers:
            return frozenset(chosen)
    return None


def switches_of(nodes: dict[str, str], placement: tuple[WorkerPlacement, ...]) -> int:
    """How many switches a placement spans (``nodes``: node -> switch, "" not known; such
    a node counts as a switch of its own)."""
    return len({nodes.get(worker.node) or f"\0{worker.node}" for worker in placement})


def topology_reason(cluster: ClusterState, shape: JobShape) -> str | None:
    """Why the gang waits for whole nodes or for one switch, if that is why."""
    workers = shape.workers
    if shape.takes_whole_nodes:
        empty = sum(
            1
            for bucket in cluster.buckets.get(shape.gpu_type, [])
            for node in bucket.values()
            if node.room_for(shape)
        )
        if empty < workers:
            return (
                f"needs {workers} whole {shape.gpu_type} nodes (nothing else on them, "
                f"as it asks for whole nodes); {empty} such are free"
            )
    if shape.needs_one_switch:
        room = {
            key: sum(node.room_for(shape) for node in nodes)
            for key, nodes in room_by_switch(cluster, shape).items()
        }
        if sum(room.values()) >= workers and max(room.values(), default=0) < workers:
            most = max(room.values(), default=0)
            return (
                f"needs its {workers} workers under one network switch (it asks for the "
                f"same switch); the most room under one switch now is for {most}"
            )
    return None
