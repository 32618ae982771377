"""The database side of a scheduling pass: load a snapshot, apply the core's decisions."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from backend.core.bulk import rows_by_key
from backend.core.instruments import SCHEDULER_PASS_SECONDS, record_decisions
from backend.core.lease import Lease
from backend.jobs.models import (
    Job,
    JobAttempt,
    JobStatus,
    StopOutcome,
    attempt_size,
    placement_from_json,
    placement_to_json,
)
from backend.jobs.snapshot import load_snapshot
from backend.jobs.transitions import bulk_transition, record_event
from jobmanager.core import (
    Decisions,
    Resize,
    WorkerPlacement,
    schedule,
)
from jobmanager.core.elastic import schedule_elastic


@dataclass
class Applied:
    """What a pass changed: jobs to deploy (pk, attempt) and jobs to stop."""

    deployments: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    insights_changed: int = 0
    resized: list[int] = field(default_factory=list)  # pks of running jobs resized


def schedule_pass(lease: Lease, elastic: bool = False) -> tuple[Decisions, Applied]:
    """Snapshot, decide and apply in one transaction that begins by recording this lease's
    fencing token: the row lock that takes serialises passes, and a job manager whose lease
    was taken over (an older token) raises LeaseLost before it reads anything. With
    ``elastic`` (the backend resizes), elastic jobs start, grow and shrink within their
    ranges (jobmanager.core.elastic); without, they run at their ``workers``."""
    started = time.perf_counter()
    with transaction.atomic():
        lease.fence()
        insights: dict[str, tuple[int, str]] = {}
        snapshot = load_snapshot(insights=insights, elastic=elastic)
        decisions = schedule_elastic(snapshot) if elastic else schedule(snapshot)
        applied = apply_decisions(decisions, insights, elastic)
    SCHEDULER_PASS_SECONDS.observe(time.perf_counter() - started)
    record_decisions(len(decisions.starts), len(decisions.preemptions), len(decisions.waits))
    return decisions, applied


def apply_decisions(
    decisions: Decisions, insights: dict[str, tuple[int, str]] | None = None, elastic: bool = False
) -> Applied:
    """Apply one pass's decisions (inside the pass's transaction) in a bounded number of
    queries: the jobs locked at once, written in one bulk update, their events in one
    insert. A job that changed meanwhile (killed, paused) is left alone. Without
    ``elastic`` (a backend that does not resize), an elastic job's start says it runs at
    its fixed size."""
    applied = Applied()
    now = timezone.now()
    changed: list[tuple[Job, str]] = []  # (job, to status), written in bulk below
    starts = {start.job_id: start for start in decisions.starts}
    preemptions = {preemption.job_id: preemption for preemption in decisions.preemptions}
    for job in _locked_jobs([*starts, *preemptions]):
        start, preemption = starts.get(job.job_id), preemptions.get(job.job_id)
        if start is not None and job.status == JobStatus.QUEUED:
            job.placement = placement_to_json(start.placement)
            if job.is_elastic:  # it starts at the size the pass gave it
                job.workers = len(start.placement)
            job.borrowing = start.borrowing
            job.attempt += 1
            job.not_before = None
            job.estimated_start_at = None
            job.reserved_placement = None
            nodes = ", ".join(sorted({worker.node for worker in start.placement}))
            borrowed = " on borrowed GPUs (preemptible)" if start.borrowing else ""
            job.status_message = f"placed on {nodes}{borrowed}"
            if job.is_elastic and not elastic:
                job.status_message += (
                    f"; runs at a fixed {job.workers} workers: this cluster's backend "
                    "does not resize jobs"
                )
            job.insight_message = ""
            changed.append((job, JobStatus.SCHEDULING))
            applied.deployments.append((job.pk, job.attempt))
        elif preemption is not None and job.status in (JobStatus.SCHEDULING, JobStatus.RUNNING):
            changed.append((job, JobStatus.PAUSING))
            job.stop_outcome = StopOutcome.REQUEUE
            job.status_message = preemption.reason
            applied.preempted.append(job.job_id)
        # else: changed meanwhile (killed, paused): left alone
    _write_transitions(changed, now)
    applied.resized = apply_resizes(decisions, now)
    applied.insights_changed = _record_insights(decisions, now, insights)
    _record_claims(decisions)
    return applied


def apply_resizes(decisions: Decisions, now: datetime) -> list[int]:
    """Grow or shrink the running elastic jobs the pass resized (its workers, placement
    and resize count), each with an event saying why, and its running attempt's sizes (for
    booked vs borrowed GPU-hours); the pks of those resized. A job that changed meanwhile
    (stopping, restarted) is left alone."""
    resized: list[int] = []
    resized_jobs: list[Job] = []
    by_id = {resize.job_id: resize for resize in decisions.resizes}
    for job in _locked_jobs(list(by_id)):
        resize = by_id[job.job_id]
        if job.status != JobStatus.RUNNING or job.workers != resize.workers_from:
            continue
        reason = _resize_reason(resize, decisions, placement_from_json(job.placement))
        job.workers = resize.workers_to
        job.placement = placement_to_json(resize.placement)
        job.resizes += 1
        job.resized_at = now
        job.status_message = reason
        job.updated_at = now
        job.save(
            update_fields=[
                "workers", "placement", "resizes", "resized_at", "status_message", "updated_at",
            ]
        )  # fmt: skip
        record_event(job, job.status, None, reason)
        resized.append(job.pk)
        resized_jobs.append(job)
    _record_sizes(resized_jobs, now)
    return resized


def _record_sizes(jobs: list[Job], now: datetime) -> None:
    """Each resized job's size since now on its running attempt, in bounded queries."""
    by_attempt = {(job.pk, job.attempt): job for job in jobs}
    changed = []
    for chunk in range(0, len(jobs), 1000):
        pks = [job.pk for job in jobs[chunk : chunk + 1000]]
        for attempt in JobAttempt.objects.filter(job_id__in=pks, ended_at__isnull=True):
            job = by_attempt.get((attempt.job_id, attempt.number))
            if job is not None:
                attempt.sizes = [*attempt.sizes, attempt_size(job, now)]
                changed.append(attempt)
    JobAttempt.objects.bulk_update(changed, ["sizes"], batch_size=500)


def _resize_reason(
    resize: Resize, decisions: Decisions, before: tuple[WorkerPlacement, ...]
) -> str:
    """What the job page says of a resize: grown into free GPUs, or shrunk for the
    guaranteed job (named, with its VC) that takes the GPUs it let go."""
    change = f"{resize.workers_from} to {resize.workers_to} workers"
    if resize.workers_to > resize.workers_from:
        return f"resized from {change}: GPUs free"
    kept = {(worker.node, gpu) for worker in resize.placement for gpu in worker.gpus}
    let_go = {(w.node, gpu) for w in before for gpu in w.gpus} - kept
    takers = [
        *((start.job_id, start.placement) for start in decisions.starts),
        *decisions.claims.items(),
    ]
    for job_id, placement in takers:
        if any((worker.node, gpu) in let_go for worker in placement for gpu in worker.gpus):
            taker = Job.objects.filter(job_id=job_id).values_list("vc__name", flat=True).first()
            return f"shrunk from {change}: guaranteed job {job_id} of VC {taker} needed its GPUs"
    return f"shrunk from {change}: guaranteed work needed its GPUs"


def _locked_jobs(job_ids: list[str]) -> list[Job]:
    """The jobs, locked for this transaction, in a bounded number of queries."""
    jobs: list[Job] = []
    for chunk in range(0, len(job_ids), 1000):
        jobs += Job.objects.select_for_update().filter(job_id__in=job_ids[chunk : chunk + 1000])
    return jobs


APPLIED_FIELDS = (
    "status", "placement", "workers", "borrowing", "attempt", "not_before", "estimated_start_at",
    "reserved_placement", "status_message", "insight_message", "stop_outcome", "updated_at",
)  # fmt: skip


def _write_transitions(changed: list[tuple[Job, str]], now: datetime) -> None:
    """The pass's changed jobs in one bulk update, and their events in one insert."""
    bulk_transition(
        changed,
        actor=None,
        reason=lambda job: job.status_message,
        fields=APPLIED_FIELDS,
        now=now,
        batch_size=500,
    )


def _record_claims(decisions: Decisions) -> None:
    """Keep the places reserved for jobs that preempted others, so that the next pass
    starts them exactly there; forget places no longer reserved."""
    for job_id, placement in decisions.claims.items():
        Job.objects.filter(job_id=job_id, status=JobStatus.QUEUED).update(
            reserved_placement=placement_to_json(placement)
        )
    Job.objects.filter(status=JobStatus.QUEUED, reserved_placement__isnull=False).exclude(
        job_id__in=list(decisions.claims)
    ).update(reserved_placement=None)


def _record_insights(
    decisions: Decisions, now: datetime, insights: dict[str, tuple[int, str]] | None = None
) -> int:
    """Each waiting job's reason, written only where it changed (a pass over thousands of
    waiting jobs must not rewrite them all). ``insights``: the primary keys and messages
    the snapshot read (in this transaction), else they are read here."""
    reasons = {wait.job_id: f"Waiting: {wait.reason}." for wait in decisions.waits}
    if insights is not None:
        current = [(job_id, *insights[job_id]) for job_id in reasons if job_id in insights]
    else:
        ids = list(reasons)
        current = []
        for chunk in range(0, len(ids), 1000):
            current += Job.objects.filter(
                job_id__in=ids[chunk : chunk + 1000], status=JobStatus.QUEUED
            ).values_list("job_id", "pk", "insight_message")
    # One update per distinct reason (a pass has a handful), not one per job.
    by_reason: dict[str, list[int]] = defaultdict(list)
    for job_id, pk, message in current:
        if message != reasons[job_id]:
            by_reason[reasons[job_id]].append(pk)
    for reason, pks in by_reason.items():
        for rows in rows_by_key(pks):
            Job.objects.filter(rows, status=JobStatus.QUEUED).update(
                insight_message=reason, updated_at=now
            )
    return sum(len(pks) for pks in by_reason.values())
