"""``manage.py watch_job_ends``: run the job manager as soon as a local worker ends.

Listens on ``TRAINYARD_LOCAL_NOTIFY_SOCKET`` for the ends the workers' inits report
(``jobmanager.backends.local_ends``) and asks for a job manager run for each (requests
collapse into one run), so that a finished job's GPUs go to the next job at once rather
than at the next periodic pass. ``run_trainyard`` starts it beside the Celery worker.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from backend.core.job_manager_triggers import request_job_manager_run
from jobmanager.backends.local_ends import EndListener

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Ask for a job manager run whenever a local-backend worker ends."

    def handle(self, *args: object, **options: Any) -> None:
        path = settings.TRAINYARD_LOCAL_NOTIFY_SOCKET
        if not path:
            raise CommandError("TRAINYARD_LOCAL_NOTIFY_SOCKET is not set.")
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        try:
            listener = EndListener(path)
        except OSError as error:
            # Ends are still found by the periodic pass; stay up, as the other servers do.
            logger.warning("Cannot listen for job ends on %s (%s); polling only.", path, error)
            stop.wait()
            return

        def on_end(job_id: str) -> None:
            logger.debug("Job %s: a worker ended", job_id)
            request_job_manager_run()

        try:
            listener.serve(on_end, stop)
        finally:
            listener.close()
