"""Every change to a job: submission and status transitions, each atomic and recorded."""

from __future__ import annotations

from functools import partial

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from backend.core.bulk import insert_rows
from backend.core.deadlocks import atomic_retrying_deadlocks
from backend.core.exceptions import ActionRefused
from backend.core.job_manager_triggers import run_job_manager_after_commit
from backend.jobs.job_request import JobRequest, RequestedResources
from backend.jobs.models import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    Job,
    JobArray,
    JobEvent,
    JobStatus,
    StopOutcome,
    new_job_id,
)
from backend.jobs.submission import approval_message, duration_text, needs_approval
from backend.jobs.transitions import (
    bulk_transition,
    record_event,
    record_submission,
    transition,
)
from backend.jobs.usage import user_guaranteed_gpus
from backend.vcs.models import Membership, Role

MAX_EXPOSED_PORTS = 8
PENDING_OR_PAUSED = (JobStatus.QUEUED, JobStatus.UNAPPROVED, JobStatus.PAUSED)


def find_idempotent_submission(owner: User, key: str) -> Job | None:
    return Job.objects.filter(owner=owner, idempotency_key=key).first()


def submit_job(
    owner: User, request: JobRequest, idempotency_key: str | None = None
) -> tuple[Job, bool]:
    """Store a job, queued or waiting for approval; return it and whether it is new.

    With an idempotency key, a repeated submission returns the job the first one created.
    The job is committed when this returns.
    """
    if idempotency_key:
        existing = find_idempotent_submission(owner, idempotency_key)
        if existing:
            return existing, False
    try:  # a deadlock with the job manager's pass is run again, not refused
        job = atomic_retrying_deadlocks(partial(_store_job, owner, request, idempotency_key))
    except IntegrityError:
        if idempotency_key:
            existing = find_idempotent_submission(owner, idempotency_key)
            if existing:  # a concurrent retry of the same submission won the race
                return existing, False
        raise
    return job, True


def _store_job(owner: User, request: JobRequest, idempotency_key: str | None) -> Job:
    job = _create_job(owner, request, idempotency_key)
    if job.status == JobStatus.QUEUED:
        run_job_manager_after_commit()
    return job


def _create_job(owner: User, request: JobRequest, idempotency_key: str | None) -> Job:
    approval_reason = _approval_reason(owner, request)
    job = Job.from_request(owner, request, approval_reason)
    job.idempotency_key = idempotency_key or None
    job.save(force_insert=True)
    record_submission(job, owner, approval_reason or "submitted")
    return job


def _approval_reason(owner: User, request: RequestedResources) -> str:
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


@transaction.atomic
def expose_port(job: Job, name: str, port: int, actor: User) -> Job:
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
def kill_job(job: Job, actor: User | None, reason: str = "") -> Job:
    """Kill a job: at once if it holds nothing, else via `killing` while the backend stops it."""
    job = _locked(job)
    reason = reason or "killed by user"
    if job.status in TERMINAL_STATUSES:
        raise ActionRefused(f"Job {job.job_id} is already {job.status}.")
    if job.status == JobStatus.KILLING:
        return job
    if job.status in ACTIVE_STATUSES:
        run_job_manager_after_commit()
        return transition(
            job,
            JobStatus.KILLING,
            actor=actor,
            reason=reason,
            status_message=reason,
            stop_outcome=StopOutcome.KILLED,
        )
    return transition(
        job,
        JobStatus.KILLED,
        actor=actor,
        reason=reason,
        status_message=reason,
        finished_at=timezone.now(),
    )


@transaction.atomic
def pause_job(job: Job, actor: User | None, reason: str = "") -> Job:
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
        return transition(
            job,
            JobStatus.PAUSING,
            actor=actor,
            reason=reason,
            status_message=reason,
            stop_outcome=StopOutcome.PAUSED,
        )
    if job.status in (JobStatus.QUEUED, JobStatus.UNAPPROVED):
        return transition(job, JobStatus.PAUSED, actor=actor, reason=reason, status_message=reason)
    raise ActionRefused(f"Job {job.job_id} is {job.status} and cannot be paused.")


@transaction.atomic
def resume_job(job: Job, actor: User | None, reason: str = "") -> Job:
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
    approval_reason = "" if approved else _approval_reason(job.owner, job)
    if approval_reason:
        return transition(
            job, JobStatus.UNAPPROVED, actor=actor, reason=reason, status_message=approval_reason
        )
    run_job_manager_after_commit()
    return transition(job, JobStatus.QUEUED, actor=actor, reason=reason, status_message="")


@transaction.atomic
def approve_job(job: Job, actor: User | None, reason: str = "") -> Job:
    """A VC admin lets a job past the per-user GPU limit."""
    job = _locked(job)
    if job.status != JobStatus.UNAPPROVED:
        raise ActionRefused(f"Job {job.job_id} is {job.status}; it needs no approval.")
    run_job_manager_after_commit()
    return transition(
        job,
        JobStatus.QUEUED,
        actor=actor,
        reason=reason or "approved by VC admin",
        status_message="",
    )


@transaction.atomic
def change_job(job: Job, actor: User, changes: dict[str, int]) -> Job:
    """Set the job's ``priority``, ``max_wall_time`` and ``max_retries`` (those given) and
    record what changed, from what, as an event. A job that has ended cannot change
    (ActionRefused). The job manager reads them at its next pass: a running job over its
    new wall time is stopped as timed out."""
    job = _locked(job)
    if job.status in TERMINAL_STATUSES:
        raise ActionRefused(f"Job {job.job_id} has ended ({job.status}): nothing to change.")
    said = [
        f"{_CHANGE_LABELS[name]} {_shown_value(name, getattr(job, name))} -> "
        f"{_shown_value(name, value)}"
        for name, value in changes.items()
        if getattr(job, name) != value
    ]
    if not said:
        return job
    for name, value in changes.items():
        setattr(job, name, value)
    job.save(update_fields=[*changes, "updated_at"])
    record_event(job, job.status, actor, "changed: " + "; ".join(said))
    run_job_manager_after_commit()
    return job


_CHANGE_LABELS = {"priority": "priority", "max_wall_time": "wall time", "max_retries": "retries"}


def _shown_value(name: str, value: int) -> str:
    return duration_text(value) if name == "max_wall_time" else str(value)


# --- job arrays ---------------------------------------------------------------------------

ARRAY_INDEX_ENV = "TRAINYARD_ARRAY_INDEX"
BULK_BATCH = 1000


def submit_job_array(
    owner: User, request: JobRequest, task_envs: list[dict[str, str]]
) -> tuple[JobArray, list[str]]:
    """Store one job per task (the request, with the task's environment over its own), all
    in one transaction; return the array and its job ids in index order.

    Each task counts against the per-user GPU limit as a single job would: the tasks past
    it wait for a VC admin's approval. Committed when this returns.
    """
    return atomic_retrying_deadlocks(partial(_store_job_array, owner, request, task_envs))


def _store_job_array(
    owner: User, request: JobRequest, task_envs: list[dict[str, str]]
) -> tuple[JobArray, list[str]]:
    array = JobArray.objects.create(
        owner=owner, vc=request.vc, name=request.name, size=len(task_envs)
    )
    held = _held_for_limit(owner, request)
    tasks = []  # (job id, index, status, message) of each task
    for index, task_env in enumerate(task_envs):
        reason = approval_message(request, held) if held is not None else ""
        if held is not None and not reason:
            held += request.workers * request.gpus_per_worker
        status = JobStatus.UNAPPROVED if reason else JobStatus.QUEUED
        tasks.append((new_job_id(), index, status, reason, {**request.env, **task_env}))
    template = Job.from_request(owner, request, array=array)
    insert_rows(
        template,
        (
            {"job_id": job_id, "array_index": index, "status": status,
             "status_message": reason, "env": env}
            for job_id, index, status, reason, env in tasks
        ),
    )  # fmt: skip
    pks = dict(Job.objects.filter(array=array).values_list("array_index", "pk"))
    submitted = f"submitted (array {array.array_id})"
    insert_rows(
        JobEvent(from_status="", actor=owner, actor_name=owner.get_username()),
        (
            {"job_id": pks[index], "to_status": status, "reason": reason or submitted}
            for _, index, status, reason, _ in tasks
        ),
    )
    if any(status == JobStatus.QUEUED for _, _, status, _, _ in tasks):
        run_job_manager_after_commit()
    return array, [job_id for job_id, *_ in tasks]


def _held_for_limit(owner: User, request: RequestedResources) -> int | None:
    """The guaranteed GPUs the owner holds in the VC, where the per-user limit applies to
    them (None where it does not: no limit, preemptible, or a VC admin)."""
    if request.vc.user_gpu_limit is None or request.preemptible:
        return None
    membership = Membership.objects.select_for_update().filter(vc=request.vc, user=owner).first()
    if owner.is_staff or (membership is not None and membership.role == Role.ADMIN):
        return None
    return user_guaranteed_gpus(owner.pk, request.vc.id)


def _array_jobs_locked(array: JobArray, statuses: tuple[str, ...]) -> list[Job]:
    return list(
        Job.objects.select_for_update().filter(array=array, status__in=statuses).order_by("pk")
    )


@transaction.atomic
def kill_job_array(array: JobArray, actor: User | None, reason: str = "") -> int:
    """Kill every task of the array that has not ended, as ``kill_job`` kills one; returns
    how many were asked to stop."""
    reason = reason or "array killed by user"
    changes = []
    now = timezone.now()
    for job in _array_jobs_locked(array, (*ACTIVE_STATUSES, *PENDING_OR_PAUSED)):
        if job.status == JobStatus.KILLING:
            continue
        job.status_message = reason
        if job.status in ACTIVE_STATUSES:
            job.stop_outcome = StopOutcome.KILLED
            changes.append((job, JobStatus.KILLING))
        else:
            job.finished_at = now
            changes.append((job, JobStatus.KILLED))
    bulk_transition(
        changes,
        actor=actor,
        reason=reason,
        fields=["status_message", "stop_outcome", "finished_at"],
        now=now,
        batch_size=BULK_BATCH,
        event_batch_size=BULK_BATCH,
    )
    if any(to_status == JobStatus.KILLING for _, to_status in changes):
        run_job_manager_after_commit()
    return len(changes)


@transaction.atomic
def pause_job_array(array: JobArray, actor: User | None, reason: str = "") -> int:
    """Pause every task that runs or waits, as ``pause_job`` pauses one; returns how many."""
    reason = reason or "array paused by user"
    changes = []
    statuses = (JobStatus.SCHEDULING, JobStatus.RUNNING, JobStatus.QUEUED, JobStatus.UNAPPROVED)
    for job in _array_jobs_locked(array, statuses):
        job.status_message = reason
        if job.status in ACTIVE_STATUSES:
            job.stop_outcome = StopOutcome.PAUSED
            changes.append((job, JobStatus.PAUSING))
        else:
            changes.append((job, JobStatus.PAUSED))
    bulk_transition(
        changes,
        actor=actor,
        reason=reason,
        fields=["status_message", "stop_outcome"],
        batch_size=BULK_BATCH,
        event_batch_size=BULK_BATCH,
    )
    if any(to_status == JobStatus.PAUSING for _, to_status in changes):
        run_job_manager_after_commit()
    return len(changes)


def resume_job_array(array: JobArray, actor: User | None, reason: str = "") -> int:
    """Resume every paused task, each as ``resume_job`` resumes one (the per-user limit
    is checked task by task); returns how many."""
    resumed = 0
    with transaction.atomic():
        for job in _array_jobs_locked(array, (JobStatus.PAUSED,)):
            resume_job(job, actor, reason or "array resumed by user")
            resumed += 1
    return resumed
