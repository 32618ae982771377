"""Ask for a job-manager run by task name, from any layer, importing no task.

The job manager's tasks sit at the top of its shell, ``backend.jobmanager`` (tasks ->
manager -> lifecycle, scheduling -> the jobs app's actions -> transitions); anything
below that asks for a run does it from here, so that no import points back up.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from backend.core.lease import lease_key
from backend.core.redis import redis_client, redis_key
from backend.core.triggers import send_task

logger = logging.getLogger(__name__)

JOB_MANAGER_LEASE = "jobmanager"
RUN_JOB_MANAGER_TASK = "backend.jobs.tasks.run_job_manager"


def job_manager_requested_key() -> str:
    """Set while a run is asked for and not yet started: requests meanwhile collapse."""
    return redis_key(JOB_MANAGER_LEASE, "requested")


def job_manager_rerun_key() -> str:
    """Set by each request: the run holding the lease goes round again while it is set."""
    return redis_key(JOB_MANAGER_LEASE, "rerun")


def job_manager_lease_key() -> str:
    """Held by the running job manager."""
    return lease_key(JOB_MANAGER_LEASE)


def request_job_manager_run() -> None:
    """Ask for a job manager run soon; requests made before it starts collapse into one,
    and so do those made while one runs: it goes round again for them (it looks for
    requests after each round and after letting its lease go), no task is queued.
    Never fails the caller: beat runs the job manager every few seconds anyway."""
    if not settings.TRAINYARD_TRIGGER_JOB_MANAGER:
        return
    try:
        client = redis_client()
        # The request first, then the look at the lease: a holder that lets it go after
        # this look still finds the request (a burst queued a task per submission, each
        # finding the lease taken: most of a burst's job manager tasks).
        pipe = client.pipeline(transaction=False)
        pipe.set(job_manager_rerun_key(), 1, ex=60)
        pipe.exists(job_manager_lease_key())
        _, running = pipe.execute()
        if running:
            return
        if client.set(job_manager_requested_key(), 1, nx=True, ex=30):
            send_task(RUN_JOB_MANAGER_TASK)
    except Exception:  # Redis or the broker being down must not fail a submission
        logger.warning("Could not ask for a job manager run; beat will run it.", exc_info=True)


def run_job_manager_after_commit() -> None:
    """Once this transaction commits, ask the job manager to look at the queue."""
    transaction.on_commit(request_job_manager_run)
