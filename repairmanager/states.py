"""The repair cycle every node moves through, and which moves are allowed.

``in_service -> out_of_pool -> ready_for_repair -> in_repair -> after_repair -> in_service``;
a node that fails its validation after repair goes back to ``in_repair``.
"""

from __future__ import annotations

from enum import StrEnum


class NodeState(StrEnum):
    IN_SERVICE = "in_service"
    OUT_OF_POOL = "out_of_pool"
    READY_FOR_REPAIR = "ready_for_repair"
    IN_REPAIR = "in_repair"
    AFTER_REPAIR = "after_repair"


NEXT_STATES: dict[NodeState, frozenset[NodeState]] = {
    NodeState.IN_SERVICE: frozenset({NodeState.OUT_OF_POOL}),
    NodeState.OUT_OF_POOL: frozenset({NodeState.READY_FOR_REPAIR}),
    NodeState.READY_FOR_REPAIR: frozenset({NodeState.IN_REPAIR}),
    NodeState.IN_REPAIR: frozenset({NodeState.AFTER_REPAIR}),
    NodeState.AFTER_REPAIR: frozenset({NodeState.IN_SERVICE, NodeState.IN_REPAIR}),
}


class MoveRefused(ValueError):
    """A move the repair cycle does not allow."""


def check_move(from_state: str, to_state: str) -> NodeState:
    """The target state, if the cycle allows ``from_state -> to_state``; else MoveRefused."""
    try:
        current, target = NodeState(from_state), NodeState(to_state)
    except ValueError as error:
        raise MoveRefused(str(error)) from None
    if target not in NEXT_STATES[current]:
        allowed = " or ".join(sorted(NEXT_STATES[current]))
        raise MoveRefused(f"A node {current} can move to {allowed}, not to {target}.")
    return target


def out_of_service_cap(total_nodes: int, max_share: float) -> int:
    """How many nodes automatic actions may leave out of service at once (rounded down)."""
    return int(total_nodes * max_share + 1e-9)
