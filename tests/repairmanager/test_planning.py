"""The pure planner: durations, the safety valve, a blind Prometheus, urgent moves."""

from __future__ import annotations

from repairmanager.planning import NodeFacts, OpenFault, observe, plan
from repairmanager.prometheus import PrometheusUnavailable, Sample
from repairmanager.rules import load_rules
from repairmanager.states import RepairState

RULES = load_rules()
NOW = 1_000_000.0


def cluster(count: int = 10, out: tuple[str, ...] = ()) -> list[NodeFacts]:
    return [
        NodeFacts(
            f"gpu-{i:02}",
            RepairState.OUT_OF_POOL if f"gpu-{i:02}" in out else RepairState.IN_SERVICE,
            8,
            last_heartbeat=NOW - 5,
        )
        for i in range(count)
    ]


def fake_prometheus(faults: dict[str, dict[str, str]], gpus: int = 8, seen: int = 10):
    """Answers like Prometheus: every node present, ``faults`` = metric -> {node: gpu}."""

    def query(promql: str) -> list[Sample]:
        if promql.startswith("count by"):
            return [Sample({"Hostname": f"gpu-{i:02}"}, gpus) for i in range(seen)]
        if "heartbeat" in promql:
            return []
        return [
            Sample({"Hostname": node, "gpu": gpu}, 1)
            for metric, nodes in faults.items()
            if promql.startswith(metric) or f"({metric}" in promql
            for node, gpu in nodes.items()
        ]

    return query


def test_a_double_bit_ecc_error_takes_its_node_out_and_moves_its_jobs_at_once():
    nodes = cluster()
    observed = observe(RULES, nodes, fake_prometheus({"DCGM_FI_DEV_ECC_DBE": {"gpu-07": "3"}}), NOW)
    decided = plan(observed, [], nodes, NOW, 0.1)
    assert [fire.node for fire in decided.take_out] == ["gpu-07"]
    assert decided.take_out[0].observation.describe() == "double-bit ECC error on GPU 3"
    assert list(decided.migrate_now) == ["gpu-07"]
    assert [obs.node for obs in decided.opened] == ["gpu-07"]


def test_faults_on_5_of_10_nodes_take_out_only_the_allowed_share():
    nodes = cluster()
    faulty = {f"gpu-{i:02}": "0" for i in (1, 3, 5, 7, 9)}
    observed = observe(RULES, nodes, fake_prometheus({"DCGM_FI_DEV_ECC_DBE": faulty}), NOW)
    decided = plan(observed, [], nodes, NOW, 0.1)
    assert len(decided.take_out) == 1
    assert sorted(fire.node for fire, _ in decided.held_back) == sorted(
        set(faulty) - {decided.take_out[0].node}
    )
    assert all("safety valve: 1 of 10 nodes already out" in why for _, why in decided.held_back)
    assert len(decided.fired) == 5  # every fault is reported


def test_nodes_already_out_count_against_the_share():
    nodes = cluster(out=("gpu-00",))
    observed = observe(RULES, nodes, fake_prometheus({"DCGM_FI_DEV_ECC_DBE": {"gpu-04": "0"}}), NOW)
    decided = plan(observed, [], nodes, NOW, 0.1)
    assert decided.take_out == []
    assert "1 of 10 nodes already out" in decided.held_back[0][1]


def test_prometheus_unreachable_or_empty_takes_no_node_out():
    def unreachable(promql: str) -> list[Sample]:
        raise PrometheusUnavailable("connection refused")

    nodes = [NodeFacts("gpu-00", RepairState.IN_SERVICE, 8, last_heartbeat=NOW - 600)]
    for query in (unreachable, lambda promql: []):
        observed = observe(RULES, nodes, query, NOW)
        assert observed.blind
        decided = plan(observed, [], nodes, NOW, 1.0)
        assert decided.take_out == []  # not even for the missed heartbeat
        assert "Prometheus is unavailable" in decided.held_back[0][1]


def test_a_fault_must_hold_for_its_duration_before_it_fires():
    nodes = cluster(1)
    query = fake_prometheus({"DCGM_FI_DEV_GPU_TEMP": {"gpu-00": "2"}}, seen=1)
    observed = observe(RULES, nodes, query, NOW)
    hot = [obs for obs in observed.observations if obs.rule.name == "gpu-hot"]
    assert hot
    first = plan(observed, [], nodes, NOW, 1.0)
    assert first.fired == [] and [obs.rule.name for obs in first.opened] == ["gpu-hot"]
    watching = [OpenFault("gpu-hot", "gpu-00", NOW - 299)]
    assert plan(observed, watching, nodes, NOW, 1.0).fired == []
    watching = [OpenFault("gpu-hot", "gpu-00", NOW - 300)]
    fired = plan(observed, watching, nodes, NOW, 1.0)
    assert [fire.observation.rule.name for fire in fired.fired] == ["gpu-hot"]
    assert fired.take_out == []  # an alert only


def test_fewer_gpus_than_the_inventory_and_a_silent_node_are_faults():
    nodes = [
        NodeFacts("gpu-00", RepairState.IN_SERVICE, 8, last_heartbeat=NOW - 5),
        NodeFacts("gpu-01", RepairState.IN_SERVICE, 8, last_heartbeat=NOW - 121),
    ]
    observed = observe(RULES, nodes, fake_prometheus({}, gpus=7, seen=1), NOW)
    found = {(obs.rule.name, obs.node, obs.detail) for obs in observed.observations}
    assert ("gpus-missing", "gpu-00", "7 of 8 GPUs visible") in found
    assert ("no-heartbeat", "gpu-01", "silent 121 s") in found


def test_a_fault_that_no_longer_holds_is_cleared():
    nodes = cluster(1)
    observed = observe(RULES, nodes, fake_prometheus({}, seen=1), NOW)
    decided = plan(observed, [OpenFault("ecc-double-bit", "gpu-00", NOW - 60, True)], nodes, NOW, 1)
    assert decided.cleared == [("ecc-double-bit", "gpu-00")]
