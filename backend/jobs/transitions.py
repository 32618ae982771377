"""A job's status machine: which changes are allowed, and the one place that makes them.

Every change of ``Job.status`` goes through ``transition`` (one job) or
``bulk_transition`` / ``transition_all`` (a scheduling round's or a reconcile pass's jobs,
in a bounded number of queries): each checks the change against ``ALLOWED``, writes it
with the fields that go with it, records a ``JobEvent`` and observes the metrics. A
change the table does not allow raises ``ForbiddenTransition`` and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from django.contrib.auth.models import User
from django.db.models import Max
from django.utils import timezone

from backend.core.bulk import insert_rows, update_rows
from backend.core.exceptions import ActionRefused
from backend.core.instruments import JOB_STATE_CHANGE_LATENCY_SECONDS, JOBS_ENDED
from backend.jobs.models import TERMINAL_STATUSES, Job, JobEvent, JobStatus
from backend.vcs.models import VirtualCluster

SYSTEM_ACTOR = "trainyard"

S = JobStatus
# Where a job may go from each status. A new job starts unapproved or queued.
INITIAL: frozenset[str] = frozenset({S.UNAPPROVED, S.QUEUED})
ALLOWED: dict[str, frozenset[str]] = {
    S.UNAPPROVED: frozenset({S.QUEUED, S.PAUSED, S.KILLED}),
    S.QUEUED: frozenset({S.SCHEDULING, S.PAUSED, S.KILLED}),
    S.PAUSED: frozenset({S.QUEUED, S.UNAPPROVED, S.KILLED}),
    # Placed: deployed (running), stopped (pausing, killing), or its deployment failed
    # (back to the queue, or failed after too many in a row).
    S.SCHEDULING: frozenset({S.RUNNING, S.PAUSING, S.KILLING, S.QUEUED, S.FAILED}),
    # Ended by itself (finished, failed, retried or lost: queued), or asked to stop.
    S.RUNNING: frozenset({S.FINISHED, S.FAILED, S.QUEUED, S.PAUSING, S.KILLING}),
    # Paused by its owner, preempted or moved off a failing node (queued), or killed.
    S.PAUSING: frozenset({S.PAUSED, S.QUEUED, S.KILLING}),
    S.KILLING: frozenset({S.KILLED, S.TIMEOUT}),
    **{status: frozenset() for status in TERMINAL_STATUSES},
}

Reason = str | Callable[[Job], str]
WRITTEN = ("status", "updated_at")  # what every bulk transition writes
BULK_UPDATE_BATCH = 1000
EVENT_BATCH = 2000


class ForbiddenTransition(ActionRefused):
    """A status change the table does not allow."""


def check(job: Job, to_status: str) -> None:
    """Raise ForbiddenTransition unless the job may go from its status to ``to_status``."""
    if to_status not in ALLOWED[job.status]:
        raise ForbiddenTransition(f"Job {job.job_id} cannot go from {job.status} to {to_status}.")


def transition(
    job: Job,
    to_status: str,
    *,
    actor: User | None,
    reason: str,
    actor_name: str = "",
    **fields: object,
) -> Job:
    """Move a (locked) job to ``to_status`` with ``fields`` set, save it and record the
    event. Raises ForbiddenTransition, changing nothing, where the table forbids it."""
    check(job, to_status)
    from_status = job.status
    job.status = to_status
    for name, value in fields.items():
        setattr(job, name, value)
    job.save()
    record_event(job, from_status, actor, reason, actor_name=actor_name)
    return job


def record_submission(job: Job, actor: User | None, reason: str) -> JobEvent:
    """The first event of a job just stored (unapproved or queued)."""
    if job.status not in INITIAL:
        raise ForbiddenTransition(f"A new job cannot start {job.status}.")
    return record_event(job, "", actor, reason)


def record_event(
    job: Job, from_status: str, actor: User | None, reason: str, actor_name: str = ""
) -> JobEvent:
    """Record an event of the job (its move from ``from_status`` to its status, or a note
    where they are the same) and observe the move's metrics."""
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


def bulk_transition(
    changes: Sequence[tuple[Job, str]],
    *,
    actor: User | None,
    reason: Reason,
    fields: Iterable[str],
    now: datetime | None = None,
    batch_size: int | None = None,
    event_batch_size: int | None = None,
) -> None:
    """Move each (locked) job to its new status, ``(job, to_status)``, with ``fields``
    already set on it: one bulk update, one insert of events (in batches of the sizes
    given). ``reason``: the events' reason, or a function of the job. Raises
    ForbiddenTransition, writing nothing, if any change is forbidden."""
    if not changes:
        return
    for job, to_status in changes:
        check(job, to_status)
    now = now or timezone.now()
    moves = [(job, job.status) for job, _ in changes]
    observe_transitions(moves, [to_status for _, to_status in changes])
    for job, to_status in changes:
        job.status = to_status
        job.updated_at = now
    written = ["status", "updated_at", *(name for name in fields if name not in WRITTEN)]
    update_rows([job for job, _ in changes], written, batch_size or BULK_UPDATE_BATCH)
    _insert_events(moves, actor, reason, now, event_batch_size)


def transition_all(
    jobs: Sequence[Job],
    to_status: str,
    *,
    actor: User | None,
    reason: Reason,
    now: datetime | None = None,
    **values: object,
) -> None:
    """Move the (locked) jobs all to ``to_status`` with the same ``values``, as
    ``bulk_transition`` does. Raises ForbiddenTransition, writing nothing."""
    for job in jobs:
        check(job, to_status)
    for job in jobs:
        for name, value in values.items():
            setattr(job, name, value)
    bulk_transition(
        [(job, to_status) for job in jobs], actor=actor, reason=reason, fields=values, now=now
    )


def _insert_events(
    moves: list[tuple[Job, str]],
    actor: User | None,
    reason: Reason,
    now: datetime,
    batch_size: int | None,
) -> None:
    # One multi-row INSERT, the values the events share prepared once (bulk_create
    # builds and compiles every event's every field).
    actor_name = actor.get_username() if actor else SYSTEM_ACTOR
    insert_rows(
        JobEvent(actor=actor, actor_name=actor_name, created_at=now),
        (
            {"job_id": job.pk, "from_status": from_status, "to_status": job.status,
             "reason": reason if isinstance(reason, str) else reason(job)}
            for job, from_status in moves
        ),
        batch_size=batch_size or EVENT_BATCH,
    )  # fmt: skip


def observe_transitions(moves: list[tuple[Job, str]], to_statuses: list[str]) -> None:
    """``record_event``'s metrics for changes written in bulk, observed before their events
    are inserted: how long each job was in its old status, and the jobs that ended; two
    queries for them all. ``moves``: (job, old status); ``to_statuses``: each new one."""
    changed = [
        (job, old, new)
        for (job, old), new in zip(moves, to_statuses, strict=True)
        if old and old != new
    ]
    if not changed:
        return
    entered = dict(
        JobEvent.objects.filter(job_id__in=[job.pk for job, _, _ in changed])
        .order_by()
        .values("job_id")
        .annotate(latest=Max("created_at"))
        .values_list("job_id", "latest")
    )
    ended = [
        (job, new)
        for job, old, new in changed
        if new in TERMINAL_STATUSES and old not in TERMINAL_STATUSES
    ]
    vc_names = dict(
        VirtualCluster.objects.filter(pk__in={job.vc_id for job, _ in ended}).values_list(
            "pk", "name"
        )
    )
    now = timezone.now()
    for job, old, new in changed:
        if job.pk in entered:
            seconds = max(0.0, (now - entered[job.pk]).total_seconds())
            JOB_STATE_CHANGE_LATENCY_SECONDS.labels(old, new).observe(seconds)
    for job, new in ended:
        JOBS_ENDED.labels(new, vc_names.get(job.vc_id, "")).inc()


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
