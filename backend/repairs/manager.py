"""The repair manager's pass: a thin shell around the pure planner in ``repairmanager``.

Takes a non-blocking lease, reads the rules and the nodes, asks Prometheus, lets
``repairmanager.planning`` decide, and applies the decisions in one transaction: faults
opened, cleared and fired (one alert each), nodes taken out of the pool, jobs moved off
failing nodes, drained nodes made ready for repair, and repaired nodes validated.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from backend.clusters.models import Node, RepairState
from backend.core.lease import acquire_lease
from backend.core.outbox import queue_email
from backend.jobs.models import ACTIVE_STATUSES, Job
from backend.repairs.actions import complete_repair_messages, move_jobs_off, move_node
from backend.repairs.mail import cluster_admin_addresses
from backend.repairs.models import NodeFault, NodeRepairEvent
from repairmanager.planning import (
    Firing,
    NodeFacts,
    Observed,
    OpenFault,
    Plan,
    Query,
    observe,
    plan,
)
from repairmanager.prometheus import PrometheusClient
from repairmanager.rules import Rule, load_rules

logger = logging.getLogger(__name__)

LEASE_NAME = "repairmanager"
LEASE_TTL_MS = 10_000  # renewed while a pass runs
PROMETHEUS_UNAVAILABLE = "prometheus-unavailable"


@dataclass
class RepairSummary:
    taken_out: list[str] = field(default_factory=list)
    held_back: list[str] = field(default_factory=list)
    jobs_moved: list[str] = field(default_factory=list)
    ready_for_repair: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    failed_validation: list[str] = field(default_factory=list)
    alerts: int = 0
    blind: str = ""


def current_rules() -> tuple[Rule, ...]:
    return load_rules(settings.TRAINYARD_REPAIR_RULES or None)


def prometheus_query() -> Query | None:
    url = settings.TRAINYARD_PROMETHEUS_URL
    if not url:
        return None
    return PrometheusClient(url, timeout=settings.TRAINYARD_PROMETHEUS_TIMEOUT).query


def run_repair_manager() -> RepairSummary | None:
    """One pass, unless another repair manager is in one (then None)."""
    lease = acquire_lease(LEASE_NAME, LEASE_TTL_MS)
    if lease is None:
        return None
    try:
        with lease.kept():
            return repair_pass(current_rules(), prometheus_query())
    finally:
        lease.release()


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment else None


def repair_pass(
    rules: tuple[Rule, ...], query: Query | None, now: datetime | None = None
) -> RepairSummary:
    now = now or timezone.now()
    summary = RepairSummary()
    nodes = {node.name: node for node in Node.objects.all()}
    facts = [
        NodeFacts(
            node.name,
            RepairState(node.repair_state),
            node.gpus,
            _epoch(node.last_heartbeat),
            node.ready,
            node.ready_reason,
        )
        for node in nodes.values()
    ]
    observed = observe(rules, facts, query, now.timestamp(), settings.TRAINYARD_REPAIR_NODE_LABEL)
    open_faults = {
        (fault.rule, fault.node.name): fault
        for fault in NodeFault.objects.filter(cleared_at__isnull=True, node__isnull=False)
        .select_related("node")
        .order_by("first_seen", "id")
        if fault.node is not None  # as the filter says: the hints allow None
    }
    decided = plan(
        observed,
        [
            OpenFault(rule, node, fault.first_seen.timestamp(), fault.fired_at is not None)
            for (rule, node), fault in open_faults.items()
        ],
        facts,
        now.timestamp(),
        settings.TRAINYARD_REPAIR_MAX_OUT_SHARE,
    )
    with transaction.atomic():
        summary.blind = observed.blind
        summary.alerts += _watch_prometheus(observed.blind, query is not None, now)
        _apply(decided, nodes, open_faults, now, summary)
        _drain(nodes, now, summary)
        _validate(observed, nodes, query is not None, summary)
    complete_repair_messages()
    return summary


def _apply(
    decided: Plan,
    nodes: dict[str, Node],
    open_faults: dict[tuple[str, str], NodeFault],
    now: datetime,
    summary: RepairSummary,
) -> None:
    for key in decided.cleared:
        NodeFault.objects.filter(pk=open_faults[key].pk).update(cleared_at=now)
    for obs in decided.opened:
        open_faults[obs.key] = NodeFault.objects.create(
            node=nodes[obs.node],
            rule=obs.rule.name,
            fault=obs.rule.fault[:300],
            detail=obs.detail[:300],
            severity=obs.rule.severity,
            action=obs.rule.action,
            first_seen=now,
        )
    held = {fire.observation.key: why for fire, why in decided.held_back}
    for fire in decided.take_out:
        move_node(
            nodes[fire.node],
            RepairState.OUT_OF_POOL,
            f"{fire.observation.describe()} (rule {fire.observation.rule.name})",
            rule=fire.observation.rule.name,
        )
        summary.taken_out.append(fire.node)
    summary.held_back = [fire.node for fire, _ in decided.held_back]
    taken = {fire.observation.key for fire in decided.take_out}
    for fire in decided.fired:
        fault = open_faults[fire.observation.key]
        fault.fired_at = now
        fault.outcome = _outcome(fire, nodes[fire.node], taken, held)
        fault.save(update_fields=["fired_at", "outcome"])
        summary.alerts += _alert_admins(fault)
    for key, why in held.items():  # held back again: say so where people look
        if key in open_faults and key not in {f.observation.key for f in decided.fired}:
            NodeFault.objects.filter(pk=open_faults[key].pk).update(outcome=_held_back(why))
    for node_name, fire in decided.migrate_now.items():
        since = datetime.fromtimestamp(fire.since, tz=now.tzinfo)
        summary.jobs_moved += move_jobs_off(node_name, fire.observation.describe(), since)


def _outcome(fire: Firing, node: Node, taken: set, held: dict) -> str:
    action = fire.observation.rule.action
    key = fire.observation.key
    if not action.takes_node_out:
        return "alert only"
    if key in held:
        return _held_back(held[key])
    if key in taken and action.urgent:
        return "taken out of the pool; its jobs moved to healthy nodes at once"
    if key in taken:
        drain = settings.TRAINYARD_REPAIR_DRAIN_SECONDS
        return f"taken out of the pool; running jobs may finish within {drain} s"
    moved = "; its jobs moved at once" if action.urgent else ""
    return f"the node was already {node.repair_state}{moved}"


HELD_BACK = "held back, the node stays in service"  # a fault's outcome: the safety valve


def _held_back(why: str) -> str:
    return f"{HELD_BACK}: {why}"


def _alert_admins(fault: NodeFault) -> int:
    node = fault.node.name if fault.node else "the cluster"
    subject = f"[{fault.severity}] {node}: {fault.describe()}"
    body = (
        f"Node: {node}\nFault: {fault.describe()}\nRule: {fault.rule} "
        f"(severity {fault.severity}, action {fault.action})\n"
        f"First seen: {timezone.localtime(fault.first_seen):%Y-%m-%d %H:%M:%S %Z}\n"
        f"Outcome: {fault.outcome}\n"
    )
    return int(queue_email(f"fault:{fault.pk}", cluster_admin_addresses(), subject, body))


def _watch_prometheus(blind: str, configured: bool, now: datetime) -> int:
    """One alert per outage of Prometheus; the outage ends when it answers again."""
    open_outage = NodeFault.objects.filter(
        node__isnull=True, rule=PROMETHEUS_UNAVAILABLE, cleared_at__isnull=True
    ).first()
    if not blind or not configured:
        if open_outage is not None:
            NodeFault.objects.filter(pk=open_outage.pk).update(cleared_at=now)
        return 0
    if open_outage is not None:
        return 0
    outage = NodeFault.objects.create(
        rule=PROMETHEUS_UNAVAILABLE,
        fault="Prometheus unavailable",
        detail=blind[:300],
        severity="critical",
        action="alert",
        first_seen=now,
        fired_at=now,
        outcome="no node is taken out of service automatically until Prometheus answers",
    )
    return _alert_admins(outage)


def _jobs_on(node_name: str) -> list[str]:
    active = Job.objects.filter(status__in=ACTIVE_STATUSES)
    return list(active.on_node(node_name).values_list("job_id", flat=True))


def _drain(nodes: dict[str, Node], now: datetime, summary: RepairSummary) -> None:
    """Nodes out of the pool with no job left are ready for repair; past the drain
    deadline, what still runs there is moved."""
    for node in Node.objects.filter(repair_state=RepairState.OUT_OF_POOL):
        if not _jobs_on(node.name):
            move_node(node, RepairState.READY_FOR_REPAIR, "drained: no job runs there")
            summary.ready_for_repair.append(node.name)
            continue
        went_out = (
            NodeRepairEvent.objects.filter(node=node, to_state=RepairState.OUT_OF_POOL)
            .order_by("-created_at")
            .first()
        )
        deadline = settings.TRAINYARD_REPAIR_DRAIN_SECONDS
        if went_out and (now - went_out.created_at).total_seconds() >= deadline:
            fault = f"drain deadline passed ({went_out.reason})"
            summary.jobs_moved += move_jobs_off(node.name, fault, now)


def _validate(
    observed: Observed, nodes: dict[str, Node], configured: bool, summary: RepairSummary
) -> None:
    """A node after repair returns to service only when no rule holds on it and, where
    Prometheus is used, every GPU of its inventory reports metrics; else back to repair.
    While Prometheus is unavailable, nodes wait."""
    if configured and observed.blind:
        return
    for node in Node.objects.filter(repair_state=RepairState.AFTER_REPAIR):
        problems = [obs.describe() for obs in observed.observations if obs.node == node.name]
        seen = observed.gpus_seen.get(node.name, 0)
        if configured and node.gpus and seen < node.gpus:
            problems.append(f"Prometheus sees {seen} of its {node.gpus} GPUs")
        if not node.ready:
            problems.append(f"the cluster backend reports it not ready ({node.ready_reason})")
        if problems:
            move_node(node, RepairState.IN_REPAIR, f"validation failed: {'; '.join(problems)}")
            summary.failed_validation.append(node.name)
        else:
            seen_text = f"all {node.gpus} GPUs report" if configured and node.gpus else "healthy"
            move_node(
                node, RepairState.IN_SERVICE, f"validation passed: {seen_text}, no rule holds"
            )
            summary.returned.append(node.name)
