"""Deployment: a scheduled job's launch (its owner's account, paths, environment, wall
time) handed to the backend, in threads for a round, and recorded as running or, when the
backend refuses it, as failed or back in the queue.

What the backend reports afterwards is read by ``reconcile.py``; the nodes it reports by
``node_sync.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from backend.accounts.models import UnixAccount
from backend.accounts.unix import NoUnixAccount, accounts_required, home_of, run_as_of
from backend.core.bulk import insert_rows
from backend.core.instruments import DEPLOY_FAILURES, JOB_WAIT_SECONDS
from backend.jobs.models import (
    Job,
    JobAttempt,
    JobStatus,
    attempt_gpus_to_json,
    attempt_size,
)
from backend.jobs.paths import PATH_FIELDS, job_path_errors
from backend.jobs.transitions import bulk_transition, transition
from jobmanager.backends import (
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    LaunchRefused,
    RunAs,
    WorkerSpec,
)
from jobmanager.faults import crash_point
from jobmanager.retries import (
    Classification,
    FailureClass,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")


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
        mark_running(job, backend.isolation(launch))
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
    outcomes |= mark_all_running(backend, deployed)
    return [outcomes[key] for key in deployments]


def _deploy_in_threads(backend: ClusterBackend, launches: list[JobLaunch]) -> list:
    """``backend.deploy`` each launch in threads; each launch's DeployError, or None. The
    backend's inventory is read once for all of them."""
    with backend.nodes_pinned():  # not once in every deployment
        return _in_threads(backend.deploy, launches, [launch.job_id for launch in launches])


def remove_in_threads(backend: ClusterBackend, job_ids: list[str]) -> None:
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


def mark_all_running(
    backend: ClusterBackend, deployed: list[tuple[tuple[int, int], JobLaunch]]
) -> dict[tuple[int, int], str]:
    """``mark_running`` for many, in one transaction; "superseded" for those killed or
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
            sizes = [attempt_size(job, now)]
            if (job.pk, job.attempt) in existing:
                JobAttempt.objects.filter(job=job, number=job.attempt).update(
                    started_at=now, nodes=nodes, gpus=gpus, borrowing=job.borrowing, sizes=sizes
                )
            else:
                attempts.append(
                    {"job_id": job.pk, "number": job.attempt, "nodes": nodes, "gpus": gpus,
                     "borrowing": job.borrowing, "sizes": sizes}
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


def launches_of(jobs: list[Job]) -> list[tuple[tuple[int, int], JobLaunch]]:
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


def mark_running(job: Job, isolation: Isolation) -> None:
    """The deployed job running (how it is isolated kept on it) and its attempt's row, with
    its first size; its wait observed at its first start."""
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
        defaults={"started_at": now, "nodes": nodes, "gpus": gpus, "borrowing": job.borrowing,
                  "sizes": [attempt_size(job, now)]},
    )  # fmt: skip


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
            back_to_queue(job, reason, not_before=timezone.now() + timedelta(seconds=backoff))
            outcome = "requeued"
    return outcome


def back_to_queue(job: Job, reason: str, not_before=None) -> None:
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
