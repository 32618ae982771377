"""Records every app shares: the outbox of emails owed to people, and the lease's fence."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class OutgoingEmail(models.Model):
    """An email owed to someone; ``key`` makes each once only, and the sender retries
    what SMTP refused, so that no email is lost to a mail server being down."""

    key = models.CharField(max_length=200, unique=True)
    recipients = models.JSONField(default=list)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        db_table = "repairs_outgoingemail"  # where the repair manager's outbox began
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["sent_at", "created_at"], name="outgoing_email_idx")]

    def __str__(self) -> str:
        return self.subject


class SchedulerFence(models.Model):
    """The highest fencing token that has applied decisions, per lease name
    (``backend/core/lease.py``): a manager whose lease expired (and whose token is therefore
    older) can no longer change anything."""

    name = models.CharField(max_length=40, primary_key=True)
    token = models.BigIntegerField(default=0)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # Moved from the jobs app without moving its rows: the table keeps its name.
        db_table = "jobs_schedulerfence"

    def __str__(self) -> str:
        return f"{self.name}: {self.token}"
