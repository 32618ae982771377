"""Repair rules as data: the shipped defaults, and bad files refused with a clear message."""

from __future__ import annotations

import pytest

from repairmanager.rules import Action, Check, RuleError, load_rules, parse_duration, parse_rules
from repairmanager.states import MoveRefused, RepairState, check_move, out_of_service_cap


def test_the_shipped_rules_say_what_the_issue_asks():
    rules = {rule.name: rule for rule in load_rules()}
    assert rules["ecc-double-bit"].action == Action.MIGRATE
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in rules["ecc-double-bit"].query
    assert rules["row-remap-failure"].action == Action.MIGRATE
    assert rules["xid-gpu-lost"].action == Action.RESTART_JOBS
    assert "79" in rules["xid-gpu-lost"].query
    assert rules["gpus-missing"].check == Check.GPU_COUNT
    assert rules["gpus-missing"].action == Action.DRAIN
    assert rules["no-heartbeat"].threshold == 120
    assert rules["gpu-hot"].for_seconds == 300
    assert rules["gpu-hot"].action == Action.ALERT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rules: 3", "top-level `rules:` list"),
        ("rules: [{check: promql}]", "rule 1: name is required"),
        ("rules: [{name: a, check: promql}]", "needs a PromQL query"),
        ("rules: [{name: a, query: up, action: reboot}]", "'reboot' is not one of"),
        ("rules: [{name: a, query: up, for: soon}]", "is not a duration"),
        ("rules: [{name: a, check: heartbeat}]", "needs the seconds it may miss"),
        ("rules: [{name: a, query: up, colour: red}]", "unknown fields colour"),
        ("rules: [{name: a, query: up}, {name: a, query: up}]", "must be unique: a"),
        ("rules: [", "not YAML"),
    ],
)
def test_a_bad_rules_file_is_refused_naming_what_is_wrong(text, message):
    with pytest.raises(RuleError, match=message):
        parse_rules(text)


def test_durations_read_as_people_write_them():
    assert [parse_duration(v) for v in ("90s", "2m", "1h", 15, "500ms")] == [90, 120, 3600, 15, 0.5]


def test_the_repair_cycle_allows_only_its_own_steps():
    path = ["in_service", "out_of_pool", "ready_for_repair", "in_repair", "after_repair"]
    for here, there in zip(path, [*path[1:], "in_service"], strict=True):
        assert check_move(here, there) == RepairState(there)
    assert check_move("after_repair", "in_repair") == RepairState.IN_REPAIR
    with pytest.raises(MoveRefused, match="can move to out_of_pool, not to in_repair"):
        check_move("in_service", "in_repair")


def test_the_safety_valve_rounds_down():
    assert out_of_service_cap(10, 0.1) == 1
    assert out_of_service_cap(9, 0.1) == 0
    assert out_of_service_cap(100, 0.25) == 25
