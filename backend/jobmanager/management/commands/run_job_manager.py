"""Run the job manager from the command line, deploying in this process (no Celery).

For operators (``--once`` to see what a pass would do now) and for tests that race
several job managers against each other.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from backend.clusters.backends import get_backend
from backend.jobmanager import manager


class Command(BaseCommand):
    help = "Run the job manager: reconcile with the backend, schedule, deploy."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1, help="How many runs, one after another.")

    def handle(self, *args: object, **options: Any) -> None:
        backend = get_backend()
        for _ in range(int(options["runs"])):
            summary = manager.run_job_manager(backend, manager.deploy_in_turn(backend))
            self.stdout.write(
                json.dumps(
                    {
                        "rounds": summary.rounds,
                        "started": summary.started,
                        "preempted": summary.preempted,
                        "finished": summary.finished,
                        "waiting": summary.waiting,
                        "lease_taken_by_another": summary.lease_taken_by_another,
                    }
                )
            )
