"""The centralized email sender: emails are written to an outbox in the transaction that
decides them, and sent (Django email over SMTP) once it commits."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.utils import timezone

from backend.repairs.models import OutgoingEmail

logger = logging.getLogger(__name__)
MAX_ATTEMPTS = 20


def cluster_admin_addresses() -> list[str]:
    """Cluster admins with an email address, and TRAINYARD_REPAIR_ALERT_EMAILS."""
    staff = get_user_model().objects.filter(is_staff=True, is_active=True).exclude(email="")
    addresses = [*staff.values_list("email", flat=True), *settings.TRAINYARD_REPAIR_ALERT_EMAILS]
    return sorted(set(addresses))


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
    from backend.repairs.tasks import send_pending_emails

    transaction.on_commit(_send_soon(send_pending_emails))
    return True


def _send_soon(task):
    def send() -> None:
        try:
            task.delay()
        except Exception:  # the broker being down must not fail a repair; beat sends later
            logger.warning("Could not queue the email sender; beat sends later.", exc_info=True)

    return send


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
