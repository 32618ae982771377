"""The repair manager's pure core: what the signals say, and what to do about it.

``observe`` evaluates every rule against Prometheus and the facts the database holds about
each node; ``plan`` turns what it sees, and the faults already being watched, into
decisions: faults that opened, cleared or fired (held long enough), nodes to take out of
the pool, nodes whose jobs must leave now, and faults the safety valve holds back.
No Django here: the same code runs in tests with no database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from repairmanager.prometheus import PrometheusUnavailable, Sample
from repairmanager.rules import Check, Rule
from repairmanager.states import RepairState, out_of_service_cap

# Prometheus returning no GPU series at all means it sees nothing, not that all is well.
PRESENCE_QUERY = "count by ({label}) (DCGM_FI_DEV_GPU_TEMP)"
AGENT_HEARTBEAT_QUERY = (
    "max by ({label}) (max_over_time(trainyard_agent_heartbeat_timestamp_seconds[15m]))"
)

Query = Callable[[str], list[Sample]]


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    state: RepairState
    gpus: int  # what the inventory says
    last_heartbeat: float | None = None  # epoch seconds, from the cluster backend
    ready: bool = True
    ready_reason: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """A rule whose condition holds on a node now."""

    rule: Rule
    node: str
    detail: str = ""  # "GPU 3", "6 of 8 GPUs visible"

    @property
    def key(self) -> tuple[str, str]:
        return (self.rule.name, self.node)

    def describe(self) -> str:
        return f"{self.rule.fault} on {self.detail}" if self.detail else self.rule.fault


@dataclass
class Observed:
    observations: list[Observation] = field(default_factory=list)
    evaluated_rules: set[str] = field(default_factory=set)
    blind: str = ""  # why Prometheus could not be used, when it could not
    gpus_seen: dict[str, int] = field(default_factory=dict)  # node -> GPUs reporting metrics


def observe(
    rules: Sequence[Rule],
    nodes: Sequence[NodeFacts],
    query: Query | None,
    now: float,
    node_label: str = "Hostname",
) -> Observed:
    """Evaluate every rule. ``query`` is None where no Prometheus is configured: the PromQL
    rules are then off. A Prometheus that fails or sees no GPU at all makes it ``blind``."""
    observed = Observed()
    known = {node.name: node for node in nodes}
    agent_heartbeats: dict[str, float] = {}
    if query is not None:
        try:
            presence = PRESENCE_QUERY.format(label=node_label)
            for sample in query(presence):
                observed.gpus_seen[sample.labels.get(node_label, "")] = int(sample.value)
            if not observed.gpus_seen:
                observed.blind = f"Prometheus returned no GPU metrics for {presence!r}"
            else:
                for sample in query(AGENT_HEARTBEAT_QUERY.format(label=node_label)):
                    agent_heartbeats[sample.labels.get(node_label, "")] = sample.value
                for rule in rules:
                    if rule.check in (Check.PROMQL, Check.GPU_COUNT):
                        _observe_promql(rule, query(rule.query), known, node_label, observed)
        except PrometheusUnavailable as error:
            observed.blind = str(error)
            observed.observations.clear()
            observed.evaluated_rules.clear()
            observed.gpus_seen.clear()
    for rule in rules:
        if rule.check == Check.HEARTBEAT:
            observed.evaluated_rules.add(rule.name)
            for node in nodes:
                beats = [b for b in (node.last_heartbeat, agent_heartbeats.get(node.name)) if b]
                if beats and now - max(beats) > rule.threshold:
                    silent = int(now - max(beats))
                    observed.observations.append(Observation(rule, node.name, f"silent {silent} s"))
        elif rule.check == Check.BACKEND_READY:
            observed.evaluated_rules.add(rule.name)
            for node in nodes:
                # A node the backend has never reported (just registered, not joined
                # yet) is not there yet, not failed.
                if not node.ready and node.last_heartbeat is not None:
                    observed.observations.append(Observation(rule, node.name, node.ready_reason))
    return observed


def _observe_promql(
    rule: Rule,
    samples: list[Sample],
    known: dict[str, NodeFacts],
    node_label: str,
    observed: Observed,
) -> None:
    observed.evaluated_rules.add(rule.name)
    seen: set[str] = set()
    for sample in samples:
        node = known.get(sample.labels.get(node_label, ""))
        if node is None or node.name in seen:
            continue  # a series of no node we know, or a second GPU of a node already seen
        if rule.check == Check.GPU_COUNT:
            if sample.value >= node.gpus:
                continue
            detail = f"{int(sample.value)} of {node.gpus} GPUs visible"
        else:
            gpu = sample.labels.get("gpu")
            detail = f"GPU {gpu}" if gpu is not None else ""
        seen.add(node.name)
        observed.observations.append(Observation(rule, node.name, detail))


@dataclass(frozen=True, slots=True)
class OpenFault:
    """A fault being watched: first seen at ``since``; ``fired`` once it held long enough."""

    rule: str
    node: str
    since: float
    fired: bool = False


@dataclass(frozen=True, slots=True)
class Firing:
    observation: Observation
    since: float

    @property
    def node(self) -> str:
        return self.observation.node


@dataclass
class Plan:
    opened: list[Observation] = field(default_factory=list)
    cleared: list[tuple[str, str]] = field(default_factory=list)
    fired: list[Firing] = field(default_factory=list)  # held long enough, this pass
    take_out: list[Firing] = field(default_factory=list)  # node -> out_of_pool
    held_back: list[tuple[Firing, str]] = field(default_factory=list)  # and why
    migrate_now: dict[str, Firing] = field(default_factory=dict)  # node -> the urgent fault
    cap: int = 0


def plan(
    observed: Observed,
    open_faults: Iterable[OpenFault],
    nodes: Sequence[NodeFacts],
    now: float,
    max_out_share: float,
) -> Plan:
    """Decide (see the module docstring). The safety valve: automatic actions never leave
    more than ``max_out_share`` of the nodes out of service, the worst faults first; and a
    blind Prometheus takes no node out at all."""
    result = Plan(cap=out_of_service_cap(len(nodes), max_out_share))
    watched = {(fault.rule, fault.node): fault for fault in open_faults}
    current = {obs.key: obs for obs in observed.observations}
    for key, fault in watched.items():
        if key not in current and fault.rule in observed.evaluated_rules:
            result.cleared.append(key)
    firing: list[Firing] = []
    for key, obs in current.items():
        known = watched.get(key)
        if known is None:
            result.opened.append(obs)
        since = known.since if known else now
        if now - since >= obs.rule.for_seconds:
            firing.append(Firing(obs, since))
            if known is None or not known.fired:
                result.fired.append(Firing(obs, since))
    state = {node.name: node.state for node in nodes}
    out = sum(1 for node in nodes if node.state != RepairState.IN_SERVICE)
    firing.sort(key=lambda f: (f.observation.rule.severity.rank, f.since, f.node))
    taking: set[str] = set()
    for fire in firing:
        action = fire.observation.rule.action
        if not action.takes_node_out:
            continue
        if state[fire.node] == RepairState.IN_SERVICE and fire.node not in taking:
            if observed.blind:
                result.held_back.append((fire, f"Prometheus is unavailable ({observed.blind})"))
                continue
            if out >= result.cap:
                why = (
                    f"safety valve: {out} of {len(nodes)} nodes already out of service, "
                    f"automatic actions may take at most {result.cap}"
                )
                result.held_back.append((fire, why))
                continue
            out += 1
            taking.add(fire.node)
            result.take_out.append(fire)
        if action.urgent and (fire.node in taking or state[fire.node] == RepairState.OUT_OF_POOL):
            result.migrate_now.setdefault(fire.node, fire)
    return result
