"""The one outbox for every email Trainyard sends (repairs, the idle watch, storage).

An email is written to the outbox in the transaction that decides it, once per ``key``,
and sent (Django email over SMTP) by ``send_pending_emails``: queued by task name once
that transaction commits, and again by every repair pass; what SMTP refuses stays owed
and is retried, up to ``MAX_ATTEMPTS`` times.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.utils import timezone

from backend.core.models import OutgoingEmail
from backend.core.triggers import send_task

logger = logging.getLogger(__name__)
MAX_ATTEMPTS = 20
SEND_TASK = "backend.core.tasks.send_pending_emails"


def queue_email(key: str, recipients: list[str], subject: str, body: str) -> bool:
    """Owe an email once per ``key``; sent after the transaction commits. False when an
    email with this key was already owed (or sent), or when nobody would receive it."""
    if not recipients:
        logger.warning("No recipient for %r; set up cluster admin emails.", subject)
        return False
    try:
        with transaction.atomic():
            OutgoingEmail.objects.create(
                key=key[:200], recipients=recipients, subject=subject[:300], body=body
            )
    except IntegrityError:
        return False
    transaction.on_commit(_send_soon)
    return True


def _send_soon() -> None:
    try:
        send_task(SEND_TASK)
    except Exception:  # the broker being down must not fail the caller; a later pass sends
        logger.warning("Could not queue the email sender; a later pass sends.", exc_info=True)


def send_pending_emails() -> int:
    """Send every owed email, oldest first; returns how many went out."""
    sent = 0
    pending = OutgoingEmail.objects.filter(sent_at__isnull=True, attempts__lt=MAX_ATTEMPTS)
    for email in pending.order_by("created_at", "id"):
        # Claim it first, so that two senders never send one email twice.
        claimed = OutgoingEmail.objects.filter(
            pk=email.pk, sent_at__isnull=True, attempts=email.attempts
        ).update(attempts=email.attempts + 1)
        if not claimed:
            continue
        message = EmailMessage(
            subject=f"{settings.EMAIL_SUBJECT_PREFIX}{email.subject}",
            body=email.body,
            to=email.recipients,
        )
        try:
            message.send()
        except Exception as error:  # SMTP down or refusing: keep it owed, retry later
            OutgoingEmail.objects.filter(pk=email.pk).update(last_error=str(error)[:2000])
            logger.warning("Could not send %r: %s", email.subject, error)
            continue
        OutgoingEmail.objects.filter(pk=email.pk).update(sent_at=timezone.now(), last_error="")
        sent += 1
    return sent
