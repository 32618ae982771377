"""Every change to a job: submission and status transitions, each atomic and recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.contrib.auth.models import AbstractUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from backend.clusters.models import GpuType
from backend.core.exceptions import ActionRefused
from backend.jobs.models import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    Job,
    JobEvent,
    JobStatus,
    StopOutcome,
    new_job_id,
)
from backend.jobs.submission import Request, needs_approval
from backend.monitoring.instruments import JOB_STATE_CHANGE_LATENCY_SECONDS, JOBS_ENDED
from backend.vcs.models import Membership, Role, VirtualCluster

SYSTEM_ACTOR = "trainyard"
MAX_EXPOSED_PORTS = 8


@dataclass
class JobSpec:
    """A validated submission with every default filled in."""

    vc: VirtualCluster
    gpu_type: GpuType
    name: str
    type: str
    command: str
    workers: int
    gpus_per_worker: int
    cpus_per_worker: Decimal
    memory_per_worker: int
    max_retries: int
    max_wall_time: int
    image: str = ""
    working_dir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    data_path: str = ""
    output_path: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    ports: list[dict] = field(default_factory=list)
    preemptible: bool = False
    priority: int = 0

    def as_request(self) -> Request:
        return Request.of(self)


def record_event(
    job: Job, from_status: str, actor: AbstractUser | None, reason: str, actor_name: str = ""
) -> JobEvent:
    if from_status and from_status != job.status:
        _observe_state_change(job, from_status)
    if job.status in TERMINAL_STATUSES and from_status not in TERMINAL_STATUSES:
        JOBS_ENDED.labels(job.status, job.vc.name).inc()
    return JobEvent.objects.create(
        job=job,
        from_status=from_status,
        to_status=job.status,
        actor=actor,
        actor_name=actor_name or (actor.get_username() if actor else SYSTEM_ACTOR),
        reason=reason,
    )


def _observe_state_change(job: Job, from_status: str) -> None:
    """How long the job was in ``from_status``: since its latest event."""
    entered = (
        JobEvent.objects.filter(job=job)
        .order_by("-created_at", "-id")
        .values_list("created_at", flat=True)
        .first()
    )
    if entered is not None:
        seconds = max(0.0, (timezone.now() - entered).total_seconds())
        JOB_STATE_CHANGE_LATENCY_SECONDS.labels(from_status, job.status).observe(seconds)


def run_job_manager_after_commit() -> None:
    """Once this transaction commits, ask the job manager to look at the queue."""
    from backend.jobs.tasks import request_job_manager_run  # tasks import this module

    transaction.on_commit(request_job_manager_run)


def find_idempotent_submission(owner: AbstractUser, key: str) -> Job | None:
    return Job.objects.filter(owner=owner, idempotency_key=key).first()


def submit_job(
    owner: AbstractUser, spec: JobSpec, idempotency_key: str | None = None
) -> tuple[Job, bool]:
    """Store a job, queued or waiting for approval; return it and whether it is new.

    With an idempotency key, a repeated submission returns the job the first one created.
    The job is committed when this returns.
    """
    if idempotency_key:
        existing = find_idempotent_submission(owner, idempotency_key)
        if existing:
            return existing, False
    try:
        with transaction.atomic():
            job = _create_job(owner, spec, idempotency_key)
            if job.status == JobStatus.QUEUED:
                run_job_manager_after_commit()
    except IntegrityError:
        if idempotency_key:
            existing = find_idempotent_submission(owner, idempotency_key)
            if existing:  # a concurrent retry of the same submission won the race
                return existing, False
        raise
    return job, True


def _create_job(owner: AbstractUser, spec: JobSpec, idempotency_key: str | None) -> Job:
    approval_reason = _approval_reason(owner, spec.as_request())
    now = timezone.now()
    job = Job.objects.create(
        job_id=new_job_id(),
        owner=owner,
        vc=spec.vc,
        name=spec.name,
        type=spec.type,
        image=spec.image,
        command=spec.command,
        working_dir=spec.working_dir,
        env=spec.env,
        workers=spec.workers,
        gpus_per_worker=spec.gpus_per_worker,
        cpus_per_worker=spec.cpus_per_worker,
        memory_per_worker=spec.memory_per_worker,
        gpu_type=spec.gpu_type,
        preemptible=spec.preemptible,
        priority=spec.priority,
        max_retries=spec.max_retries,
        max_wall_time=spec.max_wall_time,
        data_path=spec.data_path,
        output_path=spec.output_path,
        node_selector=spec.node_selector,
        ports=spec.ports,
        status=JobStatus.UNAPPROVED if approval_reason else JobStatus.QUEUED,
        status_message=approval_reason,
        idempotency_key=idempotency_key or None,
        submitted_at=now,
        queued_at=now,
    )
    record_event(job, "", owner, approval_reason or "submitted")
    return job


def _approval_reason(owner: AbstractUser, request: Request) -> str:
    """Why a job must wait for a VC admin (the per-user GPU limit), or '' when it need not."""
    if request.vc.user_gpu_limit is None or request.preemptible:
        return ""
    # Lock the owner's membership so that two concurrent submissions (or resumes) cannot
    # both slip under the per-user GPU limit.
    membership = Membership.objects.select_for_update().filter(vc=request.vc, user=owner).first()
    is_vc_admin = owner.is_staff or (membership is not None and membership.role == Role.ADMIN)
    return "" if is_vc_admin else needs_approval(request, owner.pk)


def _locked(job: Job) -> Job:
    return Job.objects.select_for_update().get(pk=job.pk)


def _transition(
    job: Job, to_status: str, actor: AbstractUser | None, reason: str, **fields: object
) -> Job:
    from_status = job.status
    job.status = to_status
    for name, value in fields.items():
        setattr(job, name, value)
    job.save()
    record_event(job, from_status, actor, reason)
    return job


@transaction.atomic
def expose_port(job: Job, name: str, port: int, actor: AbstractUser) -> Job:
    """Expose one more port of the job in the browser (/endpoints/<job>/<name>/); the
    owner's alone. Raises ActionRefused for a finished job or a name or port taken."""
    job = _locked(job)
    if job.status in TERMINAL_STATUSES:
        raise ActionRefused(f"Job {job.job_id} is {job.status}: its ports are closed.")
    taken = [p for p in job.ports or [] if p["name"] == name or p["port"] == port]
    if taken:
        raise ActionRefused(
            f"Job {job.job_id} already exposes {taken[0]['name']} ({taken[0]['port']})."
        )
    if len(job.ports or []) >= MAX_EXPOSED_PORTS:
        raise ActionRefused(f"Job {job.job_id} exposes {MAX_EXPOSED_PORTS} ports already.")
    job.ports = [*(job.ports or []), {"name": name, "port": port}]
    job.save(update_fields=["ports", "updated_at"])
    record_event(job, job.status, actor, f"exposed port {port} as {name}")
    return job


@transaction.atomic
def kill_job(job: Job, actor: AbstractUser | None, reason: str = "") -> Job:
    """Kill a job: at once if it holds nothing, else via `killing` while the backend stops it."""
    job = _locked(job)
    reason = reason or "killed by user"
    if job.status in TERMINAL_STATUSES:
        raise ActionRefused(f"Job {job.job_id} is already {job.status}.")
    if job.status == JobStatus.KILLING:
        return job
    if job.status in ACTIVE_STATUSES:
        run_job_manager_after_commit()
        return _transition(
            job,
            JobStatus.KILLING,
            actor,
            reason,
            status_message=reason,
            stop_outcome=StopOutcome.KILLED,
        )
    return _transition(
        job, JobStatus.KILLED, actor, reason, status_message=reason, finished_at=timezone.now()
    )


@transaction.atomic
def pause_job(job: Job, actor: AbstractUser | None, reason: str = "") -> Job:
    """Pause a job: it gives back its resources but stays, to be resumed later."""
    job = _locked(job)
    reason = reason or "paused by user"
    if job.status == JobStatus.PAUSING and job.stop_outcome in (
        StopOutcome.REQUEUE,
        StopOutcome.MOVED,
    ):
        # Being preempted or moved: once stopped it stays paused rather than requeued.
        job.stop_outcome = StopOutcome.PAUSED
        job.save(update_fields=["stop_outcome", "updated_at"])
        return job
    if job.status in (JobStatus.PAUSED, JobStatus.PAUSING):
        return job
    if job.status in (JobStatus.SCHEDULING, JobStatus.RUNNING):
        run_job_manager_after_commit()
        return _transition(
            job,
            JobStatus.PAUSING,
            actor,
            reason,
            status_message=reason,
            stop_outcome=StopOutcome.PAUSED,
        )
    if job.status in (JobStatus.QUEUED, JobStatus.UNAPPROVED):
        return _transition(job, JobStatus.PAUSED, actor, reason, status_message=reason)
    raise ActionRefused(f"Job {job.job_id} is {job.status} and cannot be paused.")


@transaction.atomic
def resume_job(job: Job, actor: AbstractUser | None, reason: str = "") -> Job:
    """Put a paused job back in its queue, at its original place.

    Unless a VC admin approved it before, it waits for approval again when it would take its
    owner past the VC's per-user GPU limit.
    """
    job = _locked(job)
    if job.status in (JobStatus.QUEUED, JobStatus.UNAPPROVED):
        return job
    if job.status != JobStatus.PAUSED:
        raise ActionRefused(f"Job {job.job_id} is {job.status}; only a paused job can resume.")
    reason = reason or "resumed by user"
    # A paused job holds nothing, so resuming it must pass the per-user GPU limit again,
    # unless a VC admin already approved it.
    approved = job.events.filter(
        from_status=JobStatus.UNAPPROVED, to_status=JobStatus.QUEUED
    ).exists()
    approval_reason = "" if approved else _approval_reason(job.owner, Request.of(job))
    if approval_reason:
        return _transition(job, JobStatus.UNAPPROVED, actor, reason, status_message=approval_reason)
    run_job_manager_after_commit()
    return _transition(job, JobStatus.QUEUED, actor, reason, status_message="")


@transaction.atomic
def approve_job(job: Job, actor: AbstractUser | None, reason: str = "") -> Job:
    """A VC admin lets a job past the per-user GPU limit."""
    job = _locked(job)
    if job.status != JobStatus.UNAPPROVED:
        raise ActionRefused(f"Job {job.job_id} is {job.status}; it needs no approval.")
    run_job_manager_after_commit()
    return _transition(
        job, JobStatus.QUEUED, actor, reason or "approved by VC admin", status_message=""
    )


@transaction.atomic
def set_job_priority(job: Job, priority: int, actor: AbstractUser) -> Job:
    job = _locked(job)
    job.priority = priority
    job.save(update_fields=["priority", "updated_at"])
    return job
