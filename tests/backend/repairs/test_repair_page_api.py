"""What the Node repair page reads besides states and faults: where a node may be moved
by hand from its state, and which open faults the safety valve holds back."""

from __future__ import annotations

import pytest

from backend.repairs.manager import repair_pass
from backend.repairs.models import NodeFault
from repairmanager.prometheus import Sample
from repairmanager.rules import load_rules

pytestmark = pytest.mark.django_db

REPAIRS = "/api/v1/node-repairs/"


def test_each_node_says_where_a_manual_move_may_take_it(world):
    client = world.client(world.staff)
    client.post(f"{REPAIRS}a100-1/move/", {"to_state": "out_of_pool"}, format="json")

    rows = {row["name"]: row for row in client.get(REPAIRS).json()["results"]}

    assert rows["a100-1"]["next_states"] == ["ready_for_repair"]
    assert rows["a100-2"]["next_states"] == ["out_of_pool"]


def test_a_fault_the_safety_valve_holds_back_says_so(world, settings):
    settings.TRAINYARD_REPAIR_MAX_OUT_SHARE = 0.2  # 1 of the world's 6 nodes

    def prometheus(promql: str) -> list[Sample]:
        gpus = [node.name for node in world.nodes if node.gpus]
        if promql.startswith("count by") or promql.startswith("max by"):
            return [Sample({"Hostname": name}, 8.0 if "count" in promql else 1e12) for name in gpus]
        if "ECC_DBE" in promql:
            return [Sample({"Hostname": name, "gpu": "3"}, 1.0) for name in ("a100-2", "a100-3")]
        return []

    repair_pass(load_rules(), prometheus)
    faults = world.client(world.staff).get("/api/v1/node-faults/?open=true").json()["results"]

    held = {fault["node"]: fault["held_back"] for fault in faults}
    assert sorted(held.values()) == [False, True]  # one taken out, one kept in service
    kept = next(fault for fault in faults if fault["held_back"])
    assert kept["outcome"].startswith("held back, the node stays in service: safety valve")
    assert NodeFault.objects.filter(cleared_at__isnull=True).count() == 2
