"""Background work of the job manager, run by Celery workers and beat.

The tasks keep the names they had in ``backend/jobs/tasks.py`` (``name=``): beat's
schedule, the routes and the tasks already queued in the broker name them so.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from backend.clusters.backends import get_backend
from backend.core.job_manager_triggers import job_manager_requested_key, request_job_manager_run
from backend.core.redis import redis_client
from backend.jobmanager import deployment, manager

logger = logging.getLogger(__name__)
FOLLOW_UP_SECONDS = 0.5


@shared_task(name="backend.jobs.tasks.run_job_manager", ignore_result=True)
def run_job_manager() -> dict:
    redis_client().delete(job_manager_requested_key())
    summary = manager.run_job_manager(get_backend(), _enqueue_deployments)
    if summary.over_budget:
        request_job_manager_run()  # behind the work queued meanwhile
    elif summary.stopping or summary.preempted:
        # Look again soon rather than at the next beat: freed GPUs wait for it.
        run_job_manager.apply_async(countdown=FOLLOW_UP_SECONDS)
    if summary.started or summary.preempted or summary.finished or summary.failed:
        logger.info(
            "Job manager: %d started, %d preempted, %d finished, %d failed, %d waiting",
            len(summary.started), len(summary.preempted), len(summary.finished),
            len(summary.failed), summary.waiting,
        )  # fmt: skip
    return {"rounds": summary.rounds, "started": summary.started}


def _enqueue_deployments(deployments: list[manager.Deployment]) -> None:
    """A round's placed jobs, deployed together by one task (in threads)."""
    deploy_jobs.delay([list(pair) for pair in deployments])


@shared_task(name="backend.jobs.tasks.deploy_jobs", ignore_result=True, acks_late=True)
def deploy_jobs(deployments: list[list[int]]) -> dict[str, int]:
    """Hand a round's placed attempts to the backend at once, ``TRAINYARD_DEPLOY_THREADS``
    at a time (idempotent, as ``deploy_job``); returns how many ended how."""
    outcomes = deployment.deploy_many(
        get_backend(), [(job_pk, attempt) for job_pk, attempt in deployments]
    )
    if "requeued" in outcomes:
        request_job_manager_run()
    return {outcome: outcomes.count(outcome) for outcome in set(outcomes)}


@shared_task(name="backend.jobs.tasks.deploy_job", ignore_result=True, acks_late=True)
def deploy_job(job_pk: int, attempt: int) -> str:
    """Hand one placed attempt to the backend (idempotent: a repeat changes nothing)."""
    outcome = deployment.deploy(get_backend(), job_pk, attempt)
    if outcome == "requeued":
        request_job_manager_run()
    return outcome


@shared_task(name="backend.jobs.tasks.refresh_start_estimates", ignore_result=True)
def refresh_start_estimates() -> int:
    return manager.refresh_start_estimates()


@shared_task(name="backend.jobs.tasks.purge_finished_jobs", ignore_result=True)
def purge_finished_jobs() -> int:
    return manager.purge_finished_jobs(
        settings.TRAINYARD_JOB_RETENTION_DAYS, settings.TRAINYARD_PURGE_BATCH_SIZE
    )


@shared_task(name="backend.jobs.tasks.watch_idle_jobs", ignore_result=True)
def watch_idle_jobs() -> dict:
    from backend.jobmanager.idle import watch_idle_jobs as watch

    summary = watch()
    if summary.warned or summary.killed or summary.unmeasured:
        logger.info(
            "Idle watch: %d watched, warned %s, killed %s, %d unmeasured (%s)",
            summary.watched, summary.warned, summary.killed, len(summary.unmeasured),
            summary.reason,
        )  # fmt: skip
    return {"warned": summary.warned, "killed": summary.killed}
