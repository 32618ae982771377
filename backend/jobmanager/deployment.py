"""A job's life after scheduling: deployment, what the backend reports, stops, retries.

``reconcile`` is the loop that heals drift between the database and the backend: jobs
that ended are recorded (and retried per the rules), jobs past their wall time are
stopped, jobs being stopped are finished once the backend has let go, jobs the backend
lost are requeued, and what the backend runs without the database knowing is removed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict, TypeVar

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from backend.accounts.models import UnixAccount
from backend.accounts.unix import NoUnixAccount, accounts_required, home_of, run_as_of
from backend.clusters.actions import (
    record_node_readiness,
    record_reported_place,
    register_reported_node,
)
from backend.clusters.models import Node
from backend.core.bulk import insert_rows
from backend.core.instruments import DEPLOY_FAILURES, JOB_WAIT_SECONDS
from backend.core.job_manager_triggers import run_job_manager_after_commit
from backend.jobs.logs import job_log_dir
from backend.jobs.models import (
    ACTIVE_STATUSES,
    Job,
    JobAttempt,
    JobStatus,
    StopOutcome,
    attempt_gpus_to_json,
)
from backend.jobs.paths import PATH_FIELDS, job_path_errors
from backend.jobs.transitions import bulk_transition, transition, transition_all
from jobmanager.backends import (
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    JobReport,
    LaunchRefused,
    RunAs,
    WorkerReport,
    WorkerSpec,
)
from jobmanager.backends.base import NODE_UNHEALTHY
from jobmanager.faults import crash_point
from jobmanager.retries import (
    Classification,
    FailureClass,
    classify,
    read_log_tail,
    retry_decision,
    system_requeue,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")
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


def launch_for(job: Job, run_as: RunAs | None = None) -> JobLaunch:
    from backend.jobs.endpoint_tokens import endpoint_env

    workers = tuple(
        WorkerSpec(rank, worker.node, worker.gpus, worker.millicpus, worker.memory)
        for rank, worker in enumerate(job.placed_workers)
    )
    return JobLaunch(
        job_id=job.job_id,
        attempt=job.attempt,
        name=job.name,
        owner=job.owner.get_username(),
        vc=job.vc.name,
        command=job.command,
        workers=workers,
        image=job.image,
        working_dir=job.working_dir,
        # Every job is told its endpoint token: a port may be exposed while it runs.
        env=launch_env(job) | endpoint_env(job.job_id),
        data_path=job.data_path,
        output_path=job.output_path,
        job_type=job.type,
        run_as=run_as,
        wall_time=wall_time_left(job),
        min_workers=job.min_workers if job.is_elastic else 0,
        max_workers=job.max_workers if job.is_elastic else 0,
    )


def wall_time_left(job: Job) -> float:
    """Seconds the job may still run: its wall time less what it ran since its first start
    (a requeued job keeps its start), never below zero."""
    if job.started_at is None:
        return float(job.wall_time_limit)
    ran = (timezone.now() - job.started_at).total_seconds()
    return max(0.0, job.wall_time_limit - ran)


def launch_env(job: Job) -> dict[str, str]:
    """The job's environment, and for an array's task its index (and the array's id)."""
    env = dict(job.env)
    if job.array_index is not None:
        array = job.array
        assert array is not None, "an array's task belongs to its array"
        env["TRAINYARD_ARRAY_INDEX"] = str(job.array_index)
        env["TRAINYARD_ARRAY_ID"] = array.array_id
    return env


# --- deployment ---------------------------------------------------------------------------


def owner_run_as(job: Job) -> RunAs | None:
    """The account the job runs as where jobs run as their owners (None elsewhere): the
    owner's, found or provisioned now if they have none. Raises LaunchRefused."""
    from backend.accounts.actions import unix_account_of

    if not accounts_required():
        return None
    try:
        return run_as_of(unix_account_of(job.owner))
    except NoUnixAccount as error:
        raise LaunchRefused(str(error)) from error


def check_paths_still_allowed(job: Job, run_as: RunAs | None) -> None:
    """The submit-time path rule again: a path (or a link on it) may have changed since.
    Raises LaunchRefused naming the field."""
    account = UnixAccount.objects.filter(user_id=job.owner_id).first()
    home = run_as.home if run_as is not None else home_of(account)
    paths = {name: getattr(job, name) for name in PATH_FIELDS}
    errors = job_path_errors(job.owner, job.vc.name, home, paths, run_as)
    if errors:
        raise LaunchRefused(
            "; ".join(f"{name}: {' '.join(messages)}" for name, messages in errors.items())
        )


def deploy(backend: ClusterBackend, job_pk: int, attempt: int) -> str:
    """Hand a placed job to the backend; idempotent. Returns what happened, in a word."""
    job = Job.objects.select_related("owner", "vc", "array").filter(pk=job_pk).first()
    if job is None or job.attempt != attempt or job.status != JobStatus.SCHEDULING:
        return "skipped"
    try:
        run_as = owner_run_as(job)
        check_paths_still_allowed(job, run_as)
        launch = launch_for(job, run_as)
        crash_point("deploy-before-backend")
        backend.deploy(launch)
    except DeployError as error:
        backend.remove(job.job_id)
        return _record_failed_deploy(job_pk, attempt, error)
    crash_point("deploy-before-running")
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_pk).first()
        if job is None or job.attempt != attempt or job.status != JobStatus.SCHEDULING:
            return "superseded"  # killed or paused meanwhile; reconcile stops it
        _mark_running(job, backend.isolation(launch))
    return "running"


def resize(backend: ClusterBackend, job_pk: int) -> str:
    """Bring a running job's deployment to its (resized) workers; a job no longer running
    is left to reconcile. Returns what happened, in a word."""
    job = Job.objects.select_related("owner", "vc", "array").filter(pk=job_pk).first()
    if job is None or job.status != JobStatus.RUNNING:
        return "skipped"
    try:
        backend.resize(launch_for(job, owner_run_as(job)), settings.TRAINYARD_STOP_GRACE_SECONDS)
    except DeployError as error:
        # The workers it keeps run on; those it could not start fail the gang, and
        # reconcile stops and retries the job as for any failed worker.
        logger.warning("Resizing %s failed: %s", job.job_id, error)
        return "failed"
    return "resized"


def deploy_many(backend: ClusterBackend, deployments: list[tuple[int, int]]) -> list[str]:
    """``deploy`` a round's placed jobs together; what happened to each (job pk,
    attempt), in order, in the words ``deploy`` answers.

    The same steps as ``deploy``, shared where a round's jobs share them: the jobs read in
    one query, each owner's account found once, the backend's deployments run
    ``TRAINYARD_DEPLOY_THREADS`` at a time (spawning a worker mostly waits on its init),
    and the jobs deployed marked running in one transaction (one update, one insert of
    attempts, one of events)."""
    outcomes: dict[tuple[int, int], str] = {}
    jobs = Job.objects.select_related("owner", "vc", "array").in_bulk(
        [job_pk for job_pk, _ in deployments]
    )
    accounts: dict[int, RunAs | LaunchRefused | None] = {}
    launches: list[tuple[tuple[int, int], JobLaunch]] = []
    failed: list[tuple[tuple[int, int], str, DeployError]] = []
    for key in deployments:
        job = jobs.get(key[0])
        if job is None or job.attempt != key[1] or job.status != JobStatus.SCHEDULING:
            outcomes[key] = "skipped"
            continue
        try:
            if job.owner_id not in accounts:
                try:
                    accounts[job.owner_id] = owner_run_as(job)
                except LaunchRefused as refused:
                    accounts[job.owner_id] = refused
            run_as = accounts[job.owner_id]
            if isinstance(run_as, LaunchRefused):
                raise run_as
            if any(getattr(job, name) for name in PATH_FIELDS):
                check_paths_still_allowed(job, run_as)
            launches.append((key, launch_for(job, run_as)))
        except DeployError as error:
            failed.append((key, job.job_id, error))

    if launches:
        crash_point("deploy-before-backend")
    errors = _deploy_in_threads(backend, [launch for _, launch in launches])
    deployed = []
    for (key, launch), deploy_error in zip(launches, errors, strict=True):
        if deploy_error is None:
            deployed.append((key, launch))
        else:
            failed.append((key, launch.job_id, deploy_error))
    for key, job_id, failure in failed:
        backend.remove(job_id)
        outcomes[key] = _record_failed_deploy(*key, failure)
    if deployed:
        crash_point("deploy-before-running")
    outcomes |= _mark_all_running(backend, deployed)
    return [outcomes[key] for key in deployments]


def _deploy_in_threads(backend: ClusterBackend, launches: list[JobLaunch]) -> list:
    """``backend.deploy`` each launch in threads; each launch's DeployError, or None. The
    backend's inventory is read once for all of them."""
    with backend.nodes_pinned():  # not once in every deployment
        return _in_threads(backend.deploy, launches, [launch.job_id for launch in launches])


def _remove_in_threads(backend: ClusterBackend, job_ids: list[str]) -> None:
    """``backend.remove`` each ended job in threads (a burst of short jobs ends dozens at a
    time, each removal a few file system calls); one that fails is logged, and removed
    again by a later reconcile, which finds it still held."""
    _in_threads(backend.remove, job_ids, job_ids)


def _in_threads(work: Callable[[T], None], items: list[T], job_ids: list[str]) -> list:
    """``work`` on each item, ``TRAINYARD_DEPLOY_THREADS`` threads taking them in turn;
    each item's DeployError (any other exception logged and made one), or None. Each thread
    closes whatever database connections it opened, when it is done."""
    errors: list[DeployError | None] = [None] * len(items)
    pending = iter(range(len(items)))
    lock = threading.Lock()

    def take_turns() -> None:
        try:
            while True:
                with lock:
                    index = next(pending, None)
                if index is None:
                    return
                try:
                    work(items[index])
                except DeployError as error:
                    errors[index] = error
                except Exception as error:  # not to be taken for done
                    logger.exception("%s of job %s failed", work.__name__, job_ids[index])
                    errors[index] = DeployError(f"{type(error).__name__}: {error}")
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=take_turns, name=f"{work.__name__}-{number}")
        for number in range(max(1, min(settings.TRAINYARD_DEPLOY_THREADS, len(items))))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _mark_all_running(
    backend: ClusterBackend, deployed: list[tuple[tuple[int, int], JobLaunch]]
) -> dict[tuple[int, int], str]:
    """``_mark_running`` for many, in one transaction; "superseded" for those killed or
    paused meanwhile (reconcile stops them)."""
    if not deployed:
        return {}
    outcomes = {key: "superseded" for key, _ in deployed}
    launches = dict(deployed)
    now = timezone.now()
    with transaction.atomic():
        locked = [
            job
            for job in Job.objects.select_for_update().filter(pk__in=[pk for pk, _ in launches])
            if job.status == JobStatus.SCHEDULING and (job.pk, job.attempt) in launches
        ]
        existing = set(JobAttempt.objects.filter(job__in=locked).values_list("job_id", "number"))
        attempts = []
        for job in locked:
            isolation = backend.isolation(launches[(job.pk, job.attempt)])
            if job.started_at is None:  # its first start (a requeued job keeps its start)
                JOB_WAIT_SECONDS.observe(max(0.0, (now - job.submitted_at).total_seconds()))
            job.started_at = now
            job.status_message = ""
            job.deploy_failures = 0
            job.run_as, job.limits = isolation.run_as[:200], isolation.limits[:300]
            nodes = job.placed_nodes
            gpus = attempt_gpus_to_json(job.placed_workers)
            if (job.pk, job.attempt) in existing:
                JobAttempt.objects.filter(job=job, number=job.attempt).update(
                    started_at=now, nodes=nodes, gpus=gpus, borrowing=job.borrowing
                )
            else:
                attempts.append(
                    {"job_id": job.pk, "number": job.attempt, "nodes": nodes, "gpus": gpus,
                     "borrowing": job.borrowing}
                )  # fmt: skip
            outcomes[(job.pk, job.attempt)] = "running"
        bulk_transition(
            [(job, JobStatus.RUNNING) for job in locked],
            actor=None,
            reason=lambda job: f"running on {', '.join(job.placed_nodes)}",
            fields=["started_at", "status_message", "deploy_failures", "run_as", "limits"],
            now=now,
        )
        insert_rows(JobAttempt(started_at=now), attempts)
    return outcomes


def _launches_of(jobs: list[Job]) -> list[tuple[tuple[int, int], JobLaunch]]:
    """Each job's launch (as ``isolation_of`` makes it), each owner's account read once."""
    accounts: dict[int, RunAs | None] = {}
    launches = []
    for job in jobs:
        if job.owner_id not in accounts:
            account = UnixAccount.objects.filter(user_id=job.owner_id).first()
            required = account is not None and accounts_required()
            accounts[job.owner_id] = run_as_of(account) if required else None
        launches.append(((job.pk, job.attempt), launch_for(job, accounts[job.owner_id])))
    return launches


def isolation_of(backend: ClusterBackend, job: Job) -> Isolation:
    """How the backend runs the job, from the owner's stored account (no provisioning)."""
    account = UnixAccount.objects.filter(user_id=job.owner_id).first()
    run_as = run_as_of(account) if account is not None and accounts_required() else None
    return backend.isolation(launch_for(job, run_as))


def _mark_running(job: Job, isolation: Isolation) -> None:
    now = timezone.now()
    if job.started_at is None:  # its first start (a requeued job keeps its start)
        JOB_WAIT_SECONDS.observe(max(0.0, (now - job.submitted_at).total_seconds()))
    nodes = job.placed_nodes
    transition(
        job,
        JobStatus.RUNNING,
        actor=None,
        reason=f"running on {', '.join(nodes)}",
        started_at=now,
        status_message="",
        deploy_failures=0,
        run_as=isolation.run_as[:200],
        limits=isolation.limits[:300],
    )
    gpus = attempt_gpus_to_json(job.placed_workers)
    JobAttempt.objects.update_or_create(
        job=job,
        number=job.attempt,
        defaults={"started_at": now, "nodes": nodes, "gpus": gpus, "borrowing": job.borrowing},
    )


def _record_failed_deploy(job_pk: int, attempt: int, error: DeployError) -> str:
    """A deployment failed and was undone: it counts as an attempt of its own, retried
    after a backoff (base * 2^(failures - 1)) and, after TRAINYARD_MAX_DEPLOY_FAILURES in
    a row, the end of the job, failed with the reason (as FfDL bounds its deploy retries).
    Returns "requeued", "failed" or "superseded"."""
    refused = isinstance(error, LaunchRefused)
    failure = Classification(
        FailureClass.USER if refused else FailureClass.INFRASTRUCTURE, "deploy-failed", str(error)
    )
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_pk).first()
        if job is None or job.attempt != attempt or job.status != JobStatus.SCHEDULING:
            return "superseded"
        job.deploy_failures += 1
        DEPLOY_FAILURES.inc()
        failures, limit = job.deploy_failures, settings.TRAINYARD_MAX_DEPLOY_FAILURES
        message = f"deployment {failures} of at most {limit} failed and was undone: {error}"
        JobAttempt.objects.update_or_create(
            job=job,
            number=attempt,
            defaults={
                "ended_at": timezone.now(),
                "nodes": job.placed_nodes,
                "failure_class": failure.failure_class,
                "failure_rule": failure.rule,
                "message": message,
            },
        )
        job.failure_class, job.failure_rule = failure.failure_class, failure.rule
        job.insight_message = message
        if failures >= limit:
            reason = f"failed: {failures} deployments in a row failed; the last: {error}"
            transition(
                job,
                JobStatus.FAILED,
                actor=None,
                reason=reason,
                finished_at=timezone.now(),
                status_message=reason,
                placement=[],
                borrowing=False,
            )
            outcome = "failed"
        else:
            backoff = settings.TRAINYARD_DEPLOY_BACKOFF_SECONDS * 2 ** (failures - 1)
            reason = f"{message}; back in the queue, retried in {backoff} s"
            _back_to_queue(job, reason, not_before=timezone.now() + timedelta(seconds=backoff))
            outcome = "requeued"
    return outcome


def _back_to_queue(job: Job, reason: str, not_before=None) -> None:
    """Requeue keeping ``queued_at``: the job returns to its place at the head."""
    transition(
        job,
        JobStatus.QUEUED,
        actor=None,
        reason=reason,
        placement=[],
        borrowing=False,
        stop_outcome="",
        status_message=reason,
        not_before=not_before,
    )


# --- nodes --------------------------------------------------------------------------------

HEARTBEAT_EVERY = timedelta(seconds=30)


def sync_nodes(backend: ClusterBackend) -> list[str]:
    """Take node readiness and health from the backend; register nodes it has that the
    database lacks. A backend that reports no nodes (the memory backend) changes nothing.
    Returns the nodes whose readiness changed."""
    reported = {node.name: node for node in backend.nodes()}
    if not reported:
        return []
    bad = backend.bad_nodes()
    now = timezone.now()
    changed: list[str] = []
    for node in Node.objects.all():
        seen = reported.pop(node.name, None)
        if seen is None and node.last_heartbeat is None:
            ready, reason = False, "the cluster backend has not reported this node yet"
        elif seen is None:
            ready, reason = False, "the cluster backend no longer reports this node"
        elif not seen.ready:
            ready, reason = False, "the cluster backend reports it not ready"
        else:
            ready, reason = node.name not in bad, bad.get(node.name, "")
        stale = node.last_heartbeat is None or now - node.last_heartbeat > HEARTBEAT_EVERY
        if (ready, reason) != (node.ready, node.ready_reason) or (ready and stale):
            heartbeat = now if seen is not None else node.last_heartbeat
            if record_node_readiness(node, ready, reason, heartbeat):
                changed.append(node.name)
        if seen is not None:
            record_reported_place(node, seen)
    for new in reported.values():
        register_reported_node(new, ready=new.ready and new.name not in bad, seen_at=now)
        changed.append(new.name)
    if reported:
        run_job_manager_after_commit()  # a node registered changes what fits
    return changed


# --- reconcile ----------------------------------------------------------------------------


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
                        _mark_running(locked, isolation_of(backend, locked))
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
    _mark_all_running(backend, _launches_of(ran_unrecorded))
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
            _back_to_queue(locked, reason)
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
        _back_to_queue(locked, decision.reason)


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
        _back_to_queue(locked, decision.reason)
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
    _remove_in_threads(backend, [job.job_id for job in locked])


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
            _mark_running(locked, isolation_of(backend, locked))
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
                _back_to_queue(locked, decision.reason, not_before=not_before)
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
