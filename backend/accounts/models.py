"""Who people are and how they reach their jobs: API tokens, SSH public keys, allowed IPs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.utils import timezone

if TYPE_CHECKING:
    from backend.core.querysets import Action


class OwnedQuerySet(models.QuerySet):
    """Objects that belong to one user, who alone sees them (cluster admins see all)."""

    def visible_to(
        self, user: AbstractBaseUser | AnonymousUser, action: Action = "view"
    ) -> OwnedQuerySet:
        """The user's own; nobody administers another's credentials."""
        if not user.is_authenticated or action == "administer":
            return self.none()
        return self.filter(user=user)


class ApiToken(models.Model):
    """A named, revocable token for scripts; only its SHA-256 digest is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="token_name_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} / {self.name}"


class UnixAccount(models.Model):
    """The Unix account a user's jobs, and every session into them, run as."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="unix_account"
    )
    unix_name = models.CharField(max_length=32, unique=True)
    uid = models.PositiveIntegerField(unique=True)
    gid = models.PositiveIntegerField(help_text="Primary group.")
    provisioned = models.BooleanField(
        default=False, help_text="Created by Trainyard (useradd), not found on the host."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["unix_name"]

    def __str__(self) -> str:
        return f"{self.user} = {self.unix_name} (uid {self.uid})"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from backend.accounts.unix import account_errors

        errors = account_errors(self.uid, self.gid, self.unix_name)
        if errors:
            raise ValidationError(errors)


class SshKey(models.Model):
    """A user's "global public key", installed in every job they start. A key belongs to
    one user only: the SSH gateway tells who connects by the key alone."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys"
    )
    name = models.CharField(max_length=100, blank=True)
    key_type = models.CharField(max_length=40)
    bits = models.PositiveIntegerField()
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=60)
    created_at = models.DateTimeField(default=timezone.now)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["fingerprint"], name="ssh_key_fingerprint_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.fingerprint}"


class AllowedIpQuerySet(OwnedQuerySet):
    def in_force(self, at: object = None) -> AllowedIpQuerySet:
        return self.filter(expires_at__gt=at or timezone.now())


class AllowedIp(models.Model):
    """An address or network from which a user may reach their jobs, until it expires."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="allowed_ips"
    )
    network = models.CharField(max_length=50, help_text="Normalised CIDR, e.g. 10.1.2.3/32.")
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    objects = AllowedIpQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "network"], name="allowed_ip_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.network}"

    @property
    def expired(self) -> bool:
        return self.expires_at <= timezone.now()


class AllowedIpEventKind(models.TextChoices):
    ADDED = "added"
    RENEWED = "renewed"
    EXPIRED = "expired"
    REMOVED = "removed"


class AllowedIpEvent(models.Model):
    """What happened to one of a user's allowed networks; kept after the network goes."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="allowed_ip_events"
    )
    network = models.CharField(max_length=50)
    kind = models.CharField(max_length=10, choices=AllowedIpEventKind.choices)
    at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.user} {self.network} {self.kind}"


class SshSessionOutcome(models.TextChoices):
    OPENED = "opened"
    REFUSED = "refused"
    CLOSED = "closed"


class SshSessionEvent(models.Model):
    """A connection to the SSH gateway: who came from where for which job, and whether it
    was let in (and why not). ``user`` is empty when the key named nobody."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="ssh_session_events",
    )
    login = models.CharField(max_length=200, help_text="The SSH user name, <user>+<job id>.")
    job_id = models.CharField(max_length=16, blank=True)
    address = models.CharField(max_length=50)
    outcome = models.CharField(max_length=10, choices=SshSessionOutcome.choices)
    message = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.login} from {self.address}: {self.outcome}"
