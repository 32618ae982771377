"""Celery tasks keep their names when their module moves (issue 35): beat's schedule, the
job-manager trigger and the tasks already waiting in the broker name them, and a worker
drops a message whose task name it does not know."""

from __future__ import annotations

from django.conf import settings

from backend.celery import app
from backend.core.job_manager_triggers import RUN_JOB_MANAGER_TASK
from backend.jobmanager import tasks

# What backend/jobs/tasks.py registered before the job manager's shell became an app.
JOB_MANAGER_TASKS = {
    "run_job_manager", "deploy_jobs", "deploy_job", "refresh_start_estimates",
    "purge_finished_jobs", "watch_idle_jobs",
}  # fmt: skip


def test_the_job_managers_tasks_keep_the_names_they_had_in_jobs():
    assert {name: getattr(tasks, name).name for name in JOB_MANAGER_TASKS} == {
        name: f"backend.jobs.tasks.{name}" for name in JOB_MANAGER_TASKS
    }


def test_every_task_beat_or_a_trigger_names_is_one_a_worker_knows():
    app.loader.import_default_modules()
    named = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    named.add(RUN_JOB_MANAGER_TASK)

    assert named - set(app.tasks) == set()
