"""The job manager's run: reconcile with the backend, schedule, apply, hand out deployments.

Shaped like AWX's task manager, made purer: a thin shell takes a non-blocking lease,
loads a snapshot, calls the pure core, applies its decisions in one transaction and then
enqueues deployments. Runs from beat every few seconds and on every submit, end and node
change; requests that arrive while it runs collapse into one more round.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from backend.core.job_manager_triggers import JOB_MANAGER_LEASE, job_manager_rerun_key
from backend.core.lease import Lease, LeaseLost, acquire_lease
from backend.core.redis import redis_client
from backend.jobmanager.deployment import deploy, resize
from backend.jobmanager.node_sync import sync_nodes
from backend.jobmanager.reconcile import Reconciled, reconcile
from backend.jobmanager.removal import remove_drained_nodes
from backend.jobmanager.scheduling import schedule_pass
from backend.jobs.forecast import refresh_forecasts
from backend.jobs.models import TERMINAL_STATUSES, Job
from jobmanager.backends import ClusterBackend
from jobmanager.faults import crash_point

logger = logging.getLogger(__name__)

LEASE_NAME = JOB_MANAGER_LEASE
# Short, and renewed while a pass runs: a job manager killed mid-pass frees it in seconds.
LEASE_TTL_MS = 5_000
MAX_ROUNDS = 5


# A placed attempt to hand to the backend: (the job's pk, its attempt number).
Deployment = tuple[int, int]


class DeployRound(Protocol):
    """What the job manager calls once per round, after the round's decisions are
    committed, with every attempt it placed (or found placed but not deployed); never with
    none. Production queues one task for them all (``backend.jobmanager.tasks``)."""

    def __call__(self, deployments: list[Deployment], /) -> object: ...


def deploy_in_turn(backend: ClusterBackend) -> DeployRound:
    """Deploy a round's attempts one after another in this thread, as the ``deploy_jobs``
    task would in threads: for the management command, and for tests whose database is
    one transaction that other threads cannot see."""

    def deploy_round(deployments: Sequence[Deployment]) -> list[str]:
        return [deploy(backend, job_pk, attempt) for job_pk, attempt in deployments]

    return deploy_round


@dataclass
class RunSummary:
    """What a run did, all its rounds together."""

    rounds: int = 0
    started: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    stopping: list[str] = field(default_factory=list)
    waiting: int = 0
    lease_taken_by_another: bool = False
    preempted_last_round: bool = False
    over_budget: bool = False  # stopped going round with a request left

    def add_reconciled(self, reconciled: Reconciled) -> None:
        """Count what a round's reconcile ended; ``stopping`` is the latest round's."""
        self.finished += reconciled.finished
        self.failed += reconciled.failed
        self.retried += reconciled.retried
        self.stopped += reconciled.stopped
        self.lost += reconciled.lost
        self.orphans += reconciled.orphans
        self.stopping = list(reconciled.stopping)


def run_job_manager(backend: ClusterBackend, deploy_round: DeployRound) -> RunSummary:
    """Run (a few rounds) unless another job manager is running; then leave it a request
    to go round once more. ``deploy_round`` is called once per round with the attempts it
    placed, after its decisions are committed.

    A run stops going round after ``TRAINYARD_JOB_MANAGER_BUDGET_SECONDS``, leaving the
    request for the next run (queued behind other work): it never holds a worker long.

    The request is left before trying the lease, and the holder looks for requests after
    each round and again after letting the lease go, so that no request is ever lost.
    """
    summary = RunSummary()
    client = redis_client()
    client.set(job_manager_rerun_key(), 1, ex=60)
    deadline = time.monotonic() + settings.TRAINYARD_JOB_MANAGER_BUDGET_SECONDS
    for _ in range(MAX_ROUNDS):
        lease = acquire_lease(LEASE_NAME, LEASE_TTL_MS)
        if lease is None:
            summary.lease_taken_by_another = summary.rounds == 0
            return summary
        try:
            with lease.kept():
                for _ in range(MAX_ROUNDS):
                    if time.monotonic() >= deadline:
                        summary.over_budget = True
                        return summary  # the request stays, for the next run
                    requested = client.delete(job_manager_rerun_key())
                    if not requested and not summary.preempted_last_round:
                        break
                    with _collector_paused():
                        _one_round(backend, lease, deploy_round, summary)
                    if lease.lost.is_set():
                        break
        except LeaseLost:
            logger.warning("Job manager lease lost; a newer run applies decisions now.")
            return summary
        finally:
            lease.release()
        if not client.exists(job_manager_rerun_key()):
            break
    else:
        # Requests while it ran queued no task (request_job_manager_run): one is left.
        summary.over_budget = True
    return summary


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one round. A round over 10,000 queued jobs
    makes some 300,000 objects that live until it ends; the collections they set off
    (full ones among them, each scanning all the process holds) were a fifth of its time,
    and found nothing to free. Reference counting frees the round's objects as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _one_round(
    backend: ClusterBackend, lease: Lease, deploy_round: DeployRound, summary: RunSummary
) -> None:
    summary.rounds += 1
    crash_point("jobmanager-round")
    remove_drained_nodes()
    sync_nodes(backend)
    reconciled = reconcile(backend)
    summary.add_reconciled(reconciled)
    decisions, applied = schedule_pass(lease, elastic=backend.resizes)
    grace = settings.TRAINYARD_STOP_GRACE_SECONDS
    for job_id in applied.preempted:
        backend.stop(job_id, grace)
    for job_pk in applied.resized:
        resize(backend, job_pk)
    deployments = [*applied.deployments, *reconciled.redeployed]
    if deployments:
        deploy_round(deployments)
    summary.started.extend(start.job_id for start in decisions.starts)
    summary.preempted.extend(applied.preempted)
    # A shrink frees GPUs as a preemption does: the job waiting for them starts next round.
    summary.preempted_last_round = bool(applied.preempted or applied.resized)
    summary.waiting = len(decisions.waits)


def refresh_start_estimates() -> int:
    """Estimate when each waiting job starts (running jobs end at their wall-time limits)
    and whether each job with a deadline makes it; returns how many jobs changed."""
    return refresh_forecasts()


def purge_finished_jobs(older_than_days: int, batch_size: int) -> int:
    """Delete jobs that ended more than ``older_than_days`` ago, ``batch_size`` per short
    transaction, so that the database is never locked for long. Returns how many."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    purged = 0
    while True:
        batch = list(
            Job.objects.filter(status__in=TERMINAL_STATUSES, finished_at__lt=cutoff)
            .order_by("finished_at")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not batch:
            return purged
        with transaction.atomic():
            Job.objects.filter(pk__in=batch).delete()
        purged += len(batch)
