"""Stop the jobs a stopped ``make run`` left running (``make stop-jobs``).

Jobs outlive ``make run`` by design: its Ctrl-C stops the portal, not the training, and
the next start adopts the jobs it finds still running. This command is for when they
should stop too: each running job is killed (its history says why) and its workers are
signalled now; the job manager records them killed at its next pass (at once when the
portal is running, else at the next start).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from backend.clusters.backends import get_backend
from backend.core.exceptions import ActionRefused
from backend.jobs import actions
from backend.jobs.models import ACTIVE_STATUSES, Job


def jobs_left_running() -> int:
    """How many jobs hold processes on the backend: what a stopped portal leaves running."""
    return Job.objects.filter(status__in=ACTIVE_STATUSES).count()


def left_running_message(count: int) -> str:
    """What a stopping ``make run`` says of the jobs it leaves running ("" for none)."""
    if not count:
        return ""
    if count == 1:
        return "1 job keeps running: the next make run adopts it. To stop it too: make stop-jobs."
    return (
        f"{count} jobs keep running: the next make run adopts them. To stop them too: "
        "make stop-jobs."
    )


class Command(BaseCommand):
    help = "Kill every running job and signal its workers (what make run leaves running)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reason", default="stopped with make stop-jobs")

    def handle(self, *args: object, **options: Any) -> None:
        backend = get_backend()
        stopped = []
        for job in Job.objects.filter(status__in=ACTIVE_STATUSES).order_by("pk"):
            try:
                actions.kill_job(job, actor=None, reason=options["reason"])
            except ActionRefused:
                continue  # it ended meanwhile
            backend.stop(job.job_id, settings.TRAINYARD_STOP_GRACE_SECONDS)
            stopped.append(job.job_id)
        self.stdout.write(
            f"Stopping {len(stopped)} job(s): {', '.join(stopped)}." if stopped else "No job runs."
        )
