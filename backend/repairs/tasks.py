"""Background work of the repair manager, run by Celery workers and beat."""

from __future__ import annotations

import logging

from celery import shared_task

from backend.core import outbox
from backend.repairs import manager

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def run_repair_manager() -> dict:
    summary = manager.run_repair_manager()
    if summary is None:
        return {"skipped": "another repair manager is running"}
    if summary.taken_out or summary.held_back or summary.jobs_moved or summary.blind:
        logger.warning(
            "Repair manager: taken out %s, held back %s, jobs moved %s%s",
            summary.taken_out, summary.held_back, summary.jobs_moved,
            f", Prometheus unavailable: {summary.blind}" if summary.blind else "",
        )  # fmt: skip
    outbox.send_pending_emails()
    return {"taken_out": summary.taken_out, "held_back": summary.held_back}
