"""The repair cycle every node moves through, and which moves are allowed.

``in_service -> out_of_pool -> ready_for_repair -> in_repair -> after_repair -> in_service``;
a node that fails its validation after repair goes back to ``in_repair``.
"""

from __future__ import annotations

from enum import StrEnum


class RepairState(StrEnum):
    """Where a node is in the repair cycle (the Django model's choices are made of these)."""

    IN_SERVICE = "in_service"
    OUT_OF_POOL = "out_of_pool"
    READY_FOR_REPAIR = "ready_for_repair"
    IN_REPAIR = "in_repair"
    AFTER_REPAIR = "after_repair"


NEXT_STATES: dict[RepairState, frozenset[RepairState]] = {
    RepairState.IN_SERVICE: frozenset({RepairState.OUT_OF_POOL}),
    RepairState.OUT_OF_POOL: frozenset({RepairState.READY_FOR_REPAIR}),
    RepairState.READY_FOR_REPAIR: frozenset({RepairState.IN_REPAIR}),
    RepairState.IN_REPAIR: frozenset({RepairState.AFTER_REPAIR}),
    RepairState.AFTER_REPAIR: frozenset({RepairState.IN_SERVICE, RepairState.IN_REPAIR}),
}


class MoveRefused(ValueError):
    """A move the repair cycle does not allow."""


def check_move(from_state: str, to_state: str) -> RepairState:
    """The target state, if the cycle allows ``from_state -> to_state``; else MoveRefused."""
    try:
        current, target = RepairState(from_state), RepairState(to_state)
    except ValueError as error:
        raise MoveRefused(str(error)) from None
    if target not in NEXT_STATES[current]:
        allowed = " or ".join(sorted(NEXT_STATES[current]))
        raise MoveRefused(f"A node {current} can move to {allowed}, not to {target}.")
    return target


def out_of_service_cap(total_nodes: int, max_share: float) -> int:
    """How many nodes automatic actions may leave out of service at once (rounded down)."""
    return int(total_nodes * max_share + 1e-9)
