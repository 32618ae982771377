"""Every change the repair manager makes: node moves through the repair cycle, jobs moved
off failing nodes, and the messages that tell people. Each atomic, each recorded."""

from __future__ import annotations

import logging
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from backend.clusters.models import Node, RepairState
from backend.core.job_manager_triggers import run_job_manager_after_commit
from backend.core.outbox import queue_email
from backend.jobs.models import FailureClass, Job, JobStatus, StopOutcome
from backend.jobs.transitions import transition
from backend.repairs.models import NodeRepairEvent, RepairMove
from repairmanager.states import check_move

logger = logging.getLogger(__name__)

REPAIR_ACTOR = "repairmanager"
REPAIR_FAILURE_RULE = "node-repair"


@transaction.atomic
def move_node(
    node: Node,
    to_state: str,
    reason: str,
    actor: User | None = None,
    rule: str = "",
) -> Node:
    """Move a node one step through the repair cycle (MoveRefused if the cycle forbids it).
    A node out of service is cordoned; one back in service takes work again."""
    node = Node.objects.select_for_update().get(pk=node.pk)
    from_state = node.repair_state
    target = check_move(from_state, to_state)
    node.repair_state = target
    if target == RepairState.OUT_OF_POOL:
        node.schedulable = False
    elif target == RepairState.IN_SERVICE:
        node.schedulable = True
    node.save(update_fields=["repair_state", "schedulable"])
    if target in (RepairState.OUT_OF_POOL, RepairState.IN_SERVICE):
        cordoned = target == RepairState.OUT_OF_POOL
        transaction.on_commit(lambda: _cordon_in_backend(node.name, cordoned))
    NodeRepairEvent.objects.create(
        node=node,
        from_state=from_state,
        to_state=target,
        reason=reason,
        rule=rule,
        actor=actor,
        actor_name=actor.get_username() if actor else REPAIR_ACTOR,
    )
    run_job_manager_after_commit()  # a node out of service, or back, changes what fits
    return node


def _cordon_in_backend(node_name: str, cordoned: bool) -> None:
    """Tell the cluster backend too (Kubernetes: ``spec.unschedulable``), so that nothing
    else lands there; Trainyard itself already places nothing on a node out of service."""
    from backend.clusters.backends import get_backend

    try:
        get_backend().cordon(node_name, cordoned)
    except Exception:  # the backend being away must not undo the repair decision
        logger.warning("Could not cordon %s in the cluster backend.", node_name, exc_info=True)


def active_jobs_on(node_name: str) -> list[Job]:
    """Jobs holding resources with at least one worker on the node."""
    holding = Job.objects.filter(status__in=(JobStatus.SCHEDULING, JobStatus.RUNNING))
    return list(holding.on_node(node_name).only("pk", "placement", "status"))


def repair_message(node_name: str, fault: str, at: datetime) -> str:
    when = timezone.localtime(at).strftime("%H:%M")
    return f"node {node_name}: {fault} at {when}"


@transaction.atomic
def move_jobs_off(
    node_name: str, fault: str, at: datetime, leaving: str = "a failing node"
) -> list[str]:
    """Stop every job on the failing node and send it back to the head of its queue
    without spending a retry (as a preemption does); each carries a repair message and its
    owner gets a note (that it was moved off ``leaving``). Returns the jobs moved."""
    moved: list[str] = []
    base = repair_message(node_name, fault, at)
    for candidate in active_jobs_on(node_name):
        job = Job.objects.select_for_update().select_related("owner").get(pk=candidate.pk)
        if job.status not in (JobStatus.SCHEDULING, JobStatus.RUNNING):
            continue
        reason = f"moved off {base}"
        transition(
            job,
            JobStatus.PAUSING,
            actor=None,
            reason=reason,
            actor_name=REPAIR_ACTOR,
            stop_outcome=StopOutcome.MOVED,
            status_message=reason,
            failure_class=FailureClass.INFRASTRUCTURE,
            failure_rule=REPAIR_FAILURE_RULE,
            repair_message=f"{base}; requeued without spending a retry",
        )
        RepairMove.objects.create(
            job=job, attempt=job.attempt, node=node_name, fault=fault, moved_at=at
        )
        if job.owner.email:
            queue_email(
                f"moved:{job.job_id}:{job.attempt}",
                [job.owner.email],
                f"Your job {job.name} ({job.job_id}) was moved off {leaving}",
                f"{job.repair_message}.\n\nIt keeps its place at the head of its queue and "
                "restarts on another node; no retry was spent.",
            )
        moved.append(job.job_id)
    if moved:
        run_job_manager_after_commit()
    return moved


def complete_repair_messages() -> int:
    """Jobs moved off a failing node that run again: say where ("restarted on gpu-02")."""
    completed = 0
    pending = RepairMove.objects.filter(restarted_on="").select_related("job")
    for move in pending:
        job = move.job
        if job.status != JobStatus.RUNNING or job.attempt <= move.attempt:
            continue
        nodes = ", ".join(job.placed_nodes)
        with transaction.atomic():
            RepairMove.objects.filter(pk=move.pk).update(restarted_on=nodes)
            message = (
                f"{repair_message(move.node, move.fault, move.moved_at)}; restarted on {nodes}"
            )
            Job.objects.filter(pk=job.pk).update(repair_message=message)
        completed += 1
    return completed
