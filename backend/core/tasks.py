"""Background work every app shares, run by Celery workers."""

from __future__ import annotations

from celery import shared_task

from backend.core import outbox


@shared_task(ignore_result=True)
def send_pending_emails() -> int:
    return outbox.send_pending_emails()
