"""Reconcile: the loop that heals drift between the database and the backend.

Jobs that ended are recorded (and retried per the rules), jobs past their wall time are
stopped, jobs being stopped are finished once the backend has let go, jobs the backend
lost are requeued, and what the backend runs without the database knowing is removed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from backend.jobmanager.deployment import (
    back_to_queue,
    isolation_of,
    launches_of,
    mark_all_running,
    mark_running,
    remove_in_threads,
)
from backend.jobs.logs import job_log_dir
from backend.jobs.models import (
    ACTIVE_STATUSES,
    Job,
    JobAttempt,
    JobStatus,
    StopOutcome,
)
from backend.jobs.transitions import transition, transition_all
from jobmanager.backends import (
    ClusterBackend,
    JobReport,
    WorkerReport,
)
from jobmanager.backends.base import NODE_UNHEALTHY
from jobmanager.retries import (
    Classification,
    FailureClass,
    classify,
    read_log_tail,
    retry_decision,
    system_requeue,
)

logger = logging.getLogger(__name__)
# A job in these whose every worker exited 0 has finished (a `scheduling` one ran and ended
# before its deploy task recorded that it runs).
RAN_STATUSES = (JobStatus.RUNNING, JobStatus.SCHEDULING)

# How an attempt the system ended to requeue its job is classified (no retry is spent).
MOVES = {
    StopOutcome.REQUEUE: (FailureClass.PREEMPTION, "preempted"),
    StopOutcome.MOVED: (FailureClass.INFRASTRUCTURE, "node-repair"),
}

STOPPED_STATUS = {
    StopOutcome.KILLED: JobStatus.KILLED,
    StopOutcome.PAUSED: JobStatus.PAUSED,
    StopOutcome.REQUEUE: JobStatus.QUEUED,
    StopOutcome.MOVED: JobStatus.QUEUED,
    StopOutcome.TIMEOUT: JobStatus.TIMEOUT,
}


class Ended(TypedDict, total=False):
    """What a stop writes besides its status: when the job ended (not for a pause)."""

    finished_at: datetime


@dataclass
class Reconciled:
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    stopping: list[str] = field(default_factory=list)  # asked to stop, not gone yet
    redeployed: list[tuple[int, int]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any((self.finished, self.failed, self.retried, self.stopped, self.lost))


def reconcile(backend: ClusterBackend) -> Reconciled:
    """Bring the database and the backend into agreement (see the module docstring)."""
    result = Reconciled()
    # The database first, then the backend: a deploy task finishing in between then shows
    # up as a running report of a job still `scheduling` here (and is marked running),
    # never as a running job the backend seems to have lost.
    jobs = list(
        Job.objects.filter(status__in=ACTIVE_STATUSES).select_related("vc", "owner", "array")
    )
    reports = backend.reports()
    now = timezone.now()
    grace = settings.TRAINYARD_STOP_GRACE_SECONDS
    known: set[str] = set()
    finished: list[Job] = []  # ended with every worker's exit 0: recorded in bulk below
    for job in jobs:
        known.add(job.job_id)
        report = reports.get(job.job_id)
        if report is not None and report.attempt != job.attempt:
            # An earlier attempt still around: the deploy of a `scheduling` job replaces
            # it (removing it here could remove the new one, deployed meanwhile).
            if job.status != JobStatus.SCHEDULING:
                backend.stop(job.job_id, grace)
                backend.remove(job.job_id)
            report = None
        if job.status in (JobStatus.KILLING, JobStatus.PAUSING):
            if report is not None and not report.ended:
                report = _stop(backend, job.job_id)
            if report is None or report.ended:
                _finish_stop(backend, job, report)
                result.stopped.append(job.job_id)
            else:
                result.stopping.append(job.job_id)
        elif report is None:
            if job.status == JobStatus.RUNNING:
                _requeue_lost(job)
                result.lost.append(job.job_id)
            elif job.updated_at < now - timedelta(
                seconds=settings.TRAINYARD_DEPLOY_TIMEOUT_SECONDS
            ):
                result.redeployed.append((job.pk, job.attempt))  # the deploy task was lost
        elif report.ended and report.failed_worker is None and job.status in RAN_STATUSES:
            finished.append(job)
        elif report.ended:
            _record_end(backend, job, report, result)
        elif report.failed_worker is not None:
            backend.stop(job.job_id, grace)  # one worker failed: the gang cannot go on
        else:
            if job.status == JobStatus.SCHEDULING:
                if not report.started:
                    continue  # a deployment in progress: its task records the start
                with transaction.atomic():
                    locked = Job.objects.select_for_update().get(pk=job.pk)
                    if locked.status == JobStatus.SCHEDULING and locked.attempt == job.attempt:
                        mark_running(locked, isolation_of(backend, locked))
            elif _past_wall_time(job, now) and _stop_for_wall_time(job):
                result.timed_out.append(job.job_id)
                report = _stop(backend, job.job_id)
                if report is None or report.ended:
                    _finish_stop(backend, Job.objects.get(pk=job.pk), report)
                else:
                    result.stopping.append(job.job_id)
    # Those that ran and ended before their deploy task recorded them: a job that ran has
    # a running event and a start, before its end (in bulk, as the deploy task does).
    ran_unrecorded = [job for job in finished if job.status == JobStatus.SCHEDULING]
    mark_all_running(backend, launches_of(ran_unrecorded))
    _record_finished(backend, finished, result)
    for job_id in set(reports) - known:
        report = _stop(backend, job_id)
        if report is None or report.ended:
            backend.remove(job_id)
        result.orphans.append(job_id)
    return result


def _stop(backend: ClusterBackend, job_id: str) -> JobReport | None:
    """Ask the backend to stop a job; what it reports right after (a backend that stops
    at once shows the workers gone, so the job is finished in the same pass)."""
    backend.stop(job_id, settings.TRAINYARD_STOP_GRACE_SECONDS)
    return backend.reports().get(job_id)


def _past_wall_time(job: Job, now) -> bool:
    return job.started_at is not None and now >= job.started_at + timedelta(
        seconds=job.wall_time_limit
    )


def _locked_if_unchanged(job: Job) -> Job | None:
    locked = Job.objects.select_for_update().select_related("vc").filter(pk=job.pk).first()
    if locked is None or locked.status != job.status or locked.attempt != job.attempt:
        return None
    return locked


def _stop_for_wall_time(job: Job) -> bool:
    with transaction.atomic():
        locked = _locked_if_unchanged(job)
        if locked is None:
            return False
        reason = f"ran past its wall-time limit of {locked.wall_time_limit} s"
        transition(
            locked,
            JobStatus.KILLING,
            actor=None,
            reason=reason,
            stop_outcome=StopOutcome.TIMEOUT,
            status_message=reason,
        )
    return True


def _close_attempt(
    job: Job, exit_code: int | None, failure: Classification | None, message: str
) -> None:
    JobAttempt.objects.update_or_create(
        job=job,
        number=job.attempt,
        defaults={
            "ended_at": timezone.now(),
            "exit_code": exit_code,
            "failure_class": failure.failure_class if failure else "",
            "failure_rule": failure.rule if failure else "",
            "message": message,
            "nodes": job.placed_nodes,
        },
    )


def _finish_stop(backend: ClusterBackend, job: Job, report: JobReport | None) -> None:
    """The backend has let go of a job being killed, paused, preempted or timed out."""
    with transaction.atomic():
        locked = _locked_if_unchanged(job)
        if locked is None:
            return
        outcome = locked.stop_outcome or (
            StopOutcome.PAUSED if locked.status == JobStatus.PAUSING else StopOutcome.KILLED
        )
        to_status = STOPPED_STATUS[StopOutcome(outcome)]
        failed = report.failed_worker if report else None
        exit_code = failed.exit_code if failed else None
        reason = locked.status_message or f"stopped ({outcome})"
        moved = MOVES.get(StopOutcome(outcome))
        _close_attempt(locked, exit_code, Classification(*moved, reason) if moved else None, reason)
        if to_status == JobStatus.QUEUED:
            back_to_queue(locked, reason)
        else:
            ended: Ended = {} if to_status == JobStatus.PAUSED else {"finished_at": timezone.now()}
            transition(
                locked,
                to_status,
                actor=None,
                reason=reason,
                stop_outcome="",
                placement=[],
                borrowing=False,
                exit_code=exit_code,
                **ended,
            )
    backend.remove(job.job_id)


def _requeue_lost(job: Job) -> None:
    """The backend no longer knows a running job (its node died): requeue, no retry spent."""
    with transaction.atomic():
        locked = _locked_if_unchanged(job)
        if locked is None:
            return
        decision = system_requeue("the cluster backend lost the job (node lost)")
        _close_attempt(
            locked,
            None,
            Classification(FailureClass.INFRASTRUCTURE, "node-lost", decision.reason),
            decision.reason,
        )
        locked.failure_class = FailureClass.INFRASTRUCTURE
        locked.failure_rule = "node-lost"
        back_to_queue(locked, decision.reason)


def _requeue_off_bad_node(job: Job, failed: WorkerReport, result: Reconciled) -> None:
    """A worker's node went bad: the attempt cannot go on; requeue without a retry."""
    with transaction.atomic():
        locked = _locked_if_unchanged(job)
        if locked is None:
            return
        cause = failed.reason.removeprefix(NODE_UNHEALTHY).strip(" :") or "its node went bad"
        decision = system_requeue(f"worker {failed.rank}: {cause}")
        when = timezone.localtime().strftime("%H:%M")
        _close_attempt(
            locked,
            failed.exit_code,
            Classification(FailureClass.INFRASTRUCTURE, "node-unhealthy", decision.reason),
            decision.reason,
        )
        locked.failure_class = FailureClass.INFRASTRUCTURE
        locked.failure_rule = "node-unhealthy"
        locked.repair_message = f"{cause} at {when}; requeued without spending a retry"
        back_to_queue(locked, decision.reason)
        result.lost.append(locked.job_id)


def _record_finished(backend: ClusterBackend, jobs: list[Job], result: Reconciled) -> None:
    """Running jobs whose every worker exited 0, finished together: locked in one query,
    written in one update, their attempts closed per attempt number, their events in one
    insert (a burst of short jobs ends dozens at a time)."""
    if not jobs:
        return
    attempts = {job.pk: job.attempt for job in jobs}
    now = timezone.now()
    with transaction.atomic():
        locked = [
            job
            for job in Job.objects.select_for_update().filter(
                pk__in=list(attempts), status=JobStatus.RUNNING
            )
            if job.attempt == attempts[job.pk]
        ]
        by_attempt: dict[int, list[int]] = {}
        for job in locked:
            by_attempt.setdefault(job.attempt, []).append(job.pk)
        transition_all(
            locked, JobStatus.FINISHED, actor=None, reason="all workers exited 0", now=now,
            exit_code=0, finished_at=now, status_message="finished", placement=[],
        )  # fmt: skip
        for number, pks in by_attempt.items():
            JobAttempt.objects.filter(job_id__in=pks, number=number).update(
                ended_at=now, exit_code=0, failure_class="", failure_rule="", message="finished"
            )
    result.finished.extend(job.job_id for job in locked)
    remove_in_threads(backend, [job.job_id for job in locked])


def _record_end(backend: ClusterBackend, job: Job, report: JobReport, result: Reconciled) -> None:
    """An attempt ended by itself: finished, or failed and maybe retried."""
    failed = report.failed_worker
    if failed is not None and failed.reason.startswith(NODE_UNHEALTHY):
        _requeue_off_bad_node(job, failed, result)
        backend.remove(job.job_id)
        return
    classification = None
    if failed is not None:
        log = read_log_tail(job_log_dir(job.job_id) / f"worker-{failed.rank}.log")
        classification = classify(failed.exit_code, log, reason=failed.reason)
    with transaction.atomic():
        locked = _locked_if_unchanged(job)
        if locked is None:
            return
        if locked.status == JobStatus.SCHEDULING:
            # It ran and ended before its deploy task recorded it: a job that ran has a
            # running event and a start, before its end.
            mark_running(locked, isolation_of(backend, locked))
        now = timezone.now()
        if classification is None:
            _close_attempt(locked, 0, None, "finished")
            transition(
                locked,
                JobStatus.FINISHED,
                actor=None,
                reason="all workers exited 0",
                exit_code=0,
                finished_at=now,
                status_message="finished",
                placement=[],
            )
            result.finished.append(locked.job_id)
        else:
            assert failed is not None  # only a failed worker is classified
            decision = retry_decision(
                classification,
                retries_used=locked.retries_used,
                max_retries=locked.max_retries,
                base_backoff_seconds=settings.TRAINYARD_RETRY_BACKOFF_SECONDS,
                max_backoff_seconds=settings.TRAINYARD_RETRY_BACKOFF_MAX_SECONDS,
                retry_on=locked.retry_on,
            )
            # One line says what happened and what follows: the status message.
            _close_attempt(locked, failed.exit_code, classification, decision.reason)
            locked.exit_code = failed.exit_code
            locked.failure_class = classification.failure_class
            locked.failure_rule = classification.rule
            locked.insight_message = ""
            if decision.retry:
                if decision.spends_retry:
                    locked.retries_used += 1
                not_before = now + timedelta(seconds=decision.backoff_seconds)
                back_to_queue(locked, decision.reason, not_before=not_before)
                result.retried.append(locked.job_id)
            else:
                transition(
                    locked,
                    JobStatus.FAILED,
                    actor=None,
                    reason=decision.reason,
                    finished_at=now,
                    status_message=decision.reason,
                    placement=[],
                )
                result.failed.append(locked.job_id)
    backend.remove(job.job_id)
