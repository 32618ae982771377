"""A job's life after scheduling: deployment, what the backend reports, stops, retries.

``reconcile`` is the loop that heals drift between the database and the backend: jobs
that ended are recorded (and retried per the rules), jobs past their wall time are
stopped, jobs being stopped are finished once the backend has let go, jobs the backend
lost are requeued, and what the backend runs without the database knowing is removed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from backend.accounts.models import UnixAccount
from backend.accounts.unix import NoUnixAccount, accounts_required, home_of, run_as_of
from backend.jobs.actions import SYSTEM_ACTOR, observe_transitions, record_event
from backend.jobs.logs import job_log_dir
from backend.jobs.models import (
    ACTIVE_STATUSES,
    FailureClass,
    Job,
    JobAttempt,
    JobEvent,
    JobStatus,
    StopOutcome,
)
from backend.jobs.paths import PATH_FIELDS, job_path_errors
from backend.jobs.scheduling import placement_from_json
from backend.monitoring.instruments import DEPLOY_FAILURES, JOB_WAIT_SECONDS
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
    classify,
    read_log_tail,
    retry_decision,
    system_requeue,
)

logger = logging.getLogger(__name__)

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


def launch_for(job: Job, run_as: RunAs | None = None) -> JobLaunch:
    from backend.gateway.tokens import endpoint_env

    workers = tuple(
        WorkerSpec(rank, worker.node, worker.gpus, worker.millicpus, worker.memory)
        for rank, worker in enumerate(placement_from_json(job.placement))
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
    )


def launch_env(job: Job) -> dict[str, str]:
    """The job's environment, and for an array's task its index (and the array's id)."""
    env = dict(job.env)
    if job.array_index is not None:
        env["TRAINYARD_ARRAY_INDEX"] = str(job.array_index)
        env["TRAINYARD_ARRAY_ID"] = job.array.array_id
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
    errors = job_path_errors(job.owner, job.vc.name, home, paths)
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
    for (key, launch), error in zip(launches, errors, strict=True):
        if error is None:
            deployed.append((key, launch))
        else:
            failed.append((key, launch.job_id, error))
    for key, job_id, error in failed:
        backend.remove(job_id)
        outcomes[key] = _record_failed_deploy(*key, error)
    if deployed:
        crash_point("deploy-before-running")
    outcomes |= _mark_all_running(backend, deployed)
    return [outcomes[key] for key in deployments]


def _deploy_in_threads(backend: ClusterBackend, launches: list[JobLaunch]) -> list:
    """``backend.deploy`` each launch, ``TRAINYARD_DEPLOY_THREADS`` threads taking them in
    turn; each launch's DeployError, or None. Each thread closes its own database
    connections (the inventory's) once, when it is done."""
    errors: list[DeployError | None] = [None] * len(launches)
    pending = iter(range(len(launches)))
    lock = threading.Lock()

    def work() -> None:
        try:
            while True:
                with lock:
                    index = next(pending, None)
                if index is None:
                    return
                try:
                    backend.deploy(launches[index])
                except DeployError as error:
                    errors[index] = error
                except Exception as error:  # not to be taken for deployed
                    logger.exception("Deploying job %s failed", launches[index].job_id)
                    errors[index] = DeployError(f"{type(error).__name__}: {error}")
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=work, name=f"deploy-{number}")
        for number in range(max(1, min(settings.TRAINYARD_DEPLOY_THREADS, len(launches))))
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
        attempts, events = [], []
        observe_transitions([(job, JobStatus.SCHEDULING) for job in locked], JobStatus.RUNNING)
        for job in locked:
            isolation = backend.isolation(launches[(job.pk, job.attempt)])
            if job.started_at is None:  # its first start (a requeued job keeps its start)
                JOB_WAIT_SECONDS.observe(max(0.0, (now - job.submitted_at).total_seconds()))
            job.status = JobStatus.RUNNING
            job.started_at = now
            job.status_message = ""
            job.deploy_failures = 0
            job.run_as, job.limits = isolation.run_as[:200], isolation.limits[:300]
            job.updated_at = now
            nodes = sorted({worker["node"] for worker in job.placement})
            gpus = [{"node": w["node"], "gpus": w.get("gpus", [])} for w in job.placement]
            if (job.pk, job.attempt) in existing:
                JobAttempt.objects.filter(job=job, number=job.attempt).update(
                    started_at=now, nodes=nodes, gpus=gpus, borrowing=job.borrowing
                )
            else:
                attempts.append(
                    JobAttempt(
                        job=job, number=job.attempt, started_at=now, nodes=nodes, gpus=gpus,
                        borrowing=job.borrowing,
                    )
                )  # fmt: skip
            events.append(
                JobEvent(
                    job=job, from_status=JobStatus.SCHEDULING, to_status=JobStatus.RUNNING,
                    actor_name=SYSTEM_ACTOR, reason=f"running on {', '.join(nodes)}",
                    created_at=now,
                )
            )  # fmt: skip
            outcomes[(job.pk, job.attempt)] = "running"
        Job.objects.bulk_update(
            locked,
            ["status", "started_at", "status_message", "deploy_failures", "run_as", "limits",
             "updated_at"],
        )  # fmt: skip
        JobAttempt.objects.bulk_create(attempts)
        JobEvent.objects.bulk_create(events)
    return outcomes


def isolation_of(backend: ClusterBackend, job: Job) -> Isolation:
    """How the backend runs the job, from the owner's stored account (no provisioning)."""
    account = UnixAccount.objects.filter(user_id=job.owner_id).first()
    run_as = run_as_of(account) if account is not None and accounts_required() else None
    return backend.isolation(launch_for(job, run_as))


def _mark_running(job: Job, isolation: Isolation) -> None:
    now = timezone.now()
    if job.started_at is None:  # its first start (a requeued job keeps its start)
        JOB_WAIT_SECONDS.observe(max(0.0, (now - job.submitted_at).total_seconds()))
    job.status = JobStatus.RUNNING
    job.started_at = now
    job.status_message = ""
    job.deploy_failures = 0
    job.run_as, job.limits = isolation.run_as[:200], isolation.limits[:300]
    job.save()
    nodes = sorted({worker["node"] for worker in job.placement})
    gpus = [{"node": worker["node"], "gpus": worker.get("gpus", [])} for worker in job.placement]
    JobAttempt.objects.update_or_create(
        job=job,
        number=job.attempt,
        defaults={"started_at": now, "nodes": nodes, "gpus": gpus, "borrowing": job.borrowing},
    )
    record_event(job, JobStatus.SCHEDULING, None, f"running on {', '.join(nodes)}")


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
                "nodes": sorted({worker["node"] for worker in job.placement}),
                "failure_class": failure.failure_class,
                "failure_rule": failure.rule,
                "message": message,
            },
        )
        job.failure_class, job.failure_rule = failure.failure_class, failure.rule
        job.insight_message = message
        if failures >= limit:
            reason = f"failed: {failures} deployments in a row failed; the last: {error}"
            job.status = JobStatus.FAILED
            job.finished_at = timezone.now()
            job.status_message = reason
            job.placement = []
            job.borrowing = False
            job.save()
            outcome = "failed"
        else:
            backoff = settings.TRAINYARD_DEPLOY_BACKOFF_SECONDS * 2 ** (failures - 1)
            reason = f"{message}; back in the queue, retried in {backoff} s"
            _back_to_queue(job, reason, not_before=timezone.now() + timedelta(seconds=backoff))
            outcome = "requeued"
        record_event(job, JobStatus.SCHEDULING, None, reason)
    return outcome


def _back_to_queue(job: Job, reason: str, not_before=None) -> None:
    """Requeue keeping ``queued_at``: the job returns to its place at the head."""
    job.status = JobStatus.QUEUED
    job.placement = []
    job.borrowing = False
    job.stop_outcome = ""
    job.status_message = reason
    job.not_before = not_before
    job.save()


# --- nodes --------------------------------------------------------------------------------

HEARTBEAT_EVERY = timedelta(seconds=30)


def sync_nodes(backend: ClusterBackend) -> list[str]:
    """Take node readiness and health from the backend; register nodes it has that the
    database lacks. A backend that reports no nodes (the memory backend) changes nothing.
    Returns the nodes whose readiness changed."""
    from backend.clusters.models import GpuType, Node

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
            Node.objects.filter(pk=node.pk).update(
                ready=ready, ready_reason=reason, last_heartbeat=heartbeat
            )
            if ready != node.ready:
                changed.append(node.name)
    for new in reported.values():
        units = max(new.gpus, 1)
        gpu_type, _ = GpuType.objects.get_or_create(
            name=new.gpu_type,
            defaults={
                "cpus_per_gpu": new.millicpus / 1000 / units,
                "memory_per_gpu": new.memory // units,
            },
        )
        Node.objects.create(
            name=new.name,
            gpu_type=gpu_type,
            gpus=new.gpus,
            cpus=new.millicpus / 1000,
            memory=new.memory,
            labels=new.labels,
            ready=new.ready and new.name not in bad,
            last_heartbeat=now,
        )
        changed.append(new.name)
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
    jobs = list(Job.objects.filter(status__in=ACTIVE_STATUSES).select_related("vc", "owner"))
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
        elif report.ended and report.failed_worker is None and job.status == JobStatus.RUNNING:
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
        locked.status = JobStatus.KILLING
        locked.stop_outcome = StopOutcome.TIMEOUT
        locked.status_message = reason
        locked.save()
        record_event(locked, JobStatus.RUNNING, None, reason)
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
            "nodes": sorted({worker["node"] for worker in job.placement}),
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
        from_status = locked.status
        if to_status == JobStatus.QUEUED:
            _back_to_queue(locked, reason)
        else:
            locked.status = to_status
            locked.stop_outcome = ""
            locked.placement = []
            locked.borrowing = False
            locked.exit_code = exit_code
            if to_status != JobStatus.PAUSED:
                locked.finished_at = timezone.now()
            locked.save()
        record_event(locked, from_status, None, reason)
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
        record_event(locked, JobStatus.RUNNING, None, decision.reason)


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
        record_event(locked, JobStatus.RUNNING, None, decision.reason)
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
        observe_transitions([(job, JobStatus.RUNNING) for job in locked], JobStatus.FINISHED)
        Job.objects.filter(pk__in=[job.pk for job in locked]).update(
            status=JobStatus.FINISHED, exit_code=0, finished_at=now, status_message="finished",
            placement=[], updated_at=now,
        )  # fmt: skip
        for number, pks in by_attempt.items():
            JobAttempt.objects.filter(job_id__in=pks, number=number).update(
                ended_at=now, exit_code=0, failure_class="", failure_rule="", message="finished"
            )
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    job=job, from_status=JobStatus.RUNNING, to_status=JobStatus.FINISHED,
                    actor_name=SYSTEM_ACTOR, reason="all workers exited 0", created_at=now,
                )
                for job in locked
            ]
        )  # fmt: skip
    for job in locked:
        result.finished.append(job.job_id)
        backend.remove(job.job_id)


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
        from_status = locked.status
        now = timezone.now()
        if classification is None:
            _close_attempt(locked, 0, None, "finished")
            locked.status = JobStatus.FINISHED
            locked.exit_code = 0
            locked.finished_at = now
            locked.status_message = "finished"
            locked.placement = []
            locked.save()
            record_event(locked, from_status, None, "all workers exited 0")
            result.finished.append(locked.job_id)
        else:
            _close_attempt(locked, failed.exit_code, classification, classification.message)
            decision = retry_decision(
                classification,
                retries_used=locked.retries_used,
                max_retries=locked.max_retries,
                base_backoff_seconds=settings.TRAINYARD_RETRY_BACKOFF_SECONDS,
                max_backoff_seconds=settings.TRAINYARD_RETRY_BACKOFF_MAX_SECONDS,
            )
            locked.exit_code = failed.exit_code
            locked.failure_class = classification.failure_class
            locked.failure_rule = classification.rule
            locked.insight_message = classification.message
            if decision.retry:
                if decision.spends_retry:
                    locked.retries_used += 1
                not_before = now + timedelta(seconds=decision.backoff_seconds)
                _back_to_queue(locked, decision.reason, not_before=not_before)
                result.retried.append(locked.job_id)
            else:
                locked.status = JobStatus.FAILED
                locked.finished_at = now
                locked.status_message = decision.reason
                locked.placement = []
                locked.save()
                result.failed.append(locked.job_id)
            record_event(locked, from_status, None, decision.reason)
    backend.remove(job.job_id)
