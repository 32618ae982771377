"""Changes to users and their credentials; each one atomic."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.db import transaction
from django.utils import timezone

from backend.accounts.models import AllowedIp, ApiToken, SshKey
from backend.accounts.validators import parse_allowed_network, parse_ssh_public_key

User = get_user_model()
TOKEN_PREFIX = "ty_"


def token_digest(plaintext: str) -> str:
    """Tokens are 256 random bits, so one SHA-256 round is as strong as a slow hash here."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


@transaction.atomic
def create_api_token(user: AbstractUser, name: str) -> tuple[ApiToken, str]:
    """Create a token and return it with its plaintext, which is never stored or shown again."""
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=plaintext[:10], digest=token_digest(plaintext)
    )
    return token, plaintext


def revoke_api_token(token: ApiToken) -> None:
    token.delete()


def user_for_token(plaintext: str) -> AbstractUser | None:
    """The active user a token belongs to, noting when it was last used."""
    try:
        token = ApiToken.objects.select_related("user").get(digest=token_digest(plaintext))
    except ApiToken.DoesNotExist:
        return None
    if not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=5):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


def add_ssh_key(user: AbstractUser, public_key: str, name: str = "") -> SshKey:
    """Validate and store a public key; raise ValueError for a bad or duplicate key."""
    parsed = parse_ssh_public_key(public_key)
    if SshKey.objects.filter(user=user, fingerprint=parsed.fingerprint).exists():
        raise ValueError(f"You already added this key ({parsed.fingerprint}).")
    return SshKey.objects.create(
        user=user,
        name=name or parsed.comment[:100],
        key_type=parsed.key_type,
        bits=parsed.bits,
        public_key=parsed.public_key,
        fingerprint=parsed.fingerprint,
    )


def default_allowed_ip_expiry() -> datetime:
    return timezone.now() + timedelta(days=settings.TRAINYARD_ALLOWED_IP_DAYS)


def add_allowed_ip(
    user: AbstractUser,
    address: str,
    description: str = "",
    expires_at: datetime | None = None,
) -> AllowedIp:
    """Allow a network for the user until `expires_at` (default: the cluster's lifetime).

    Adding a network the user already has renews it.
    """
    network = parse_allowed_network(address)
    now = timezone.now()
    longest = now + timedelta(days=settings.TRAINYARD_ALLOWED_IP_DAYS)
    if expires_at is None:
        expires_at = longest
    elif expires_at <= now:
        raise ValueError("The expiry must be in the future.")
    elif expires_at > longest:
        raise ValueError(
            f"The expiry can be at most {settings.TRAINYARD_ALLOWED_IP_DAYS} days from now."
        )
    allowed, _ = AllowedIp.objects.update_or_create(
        user=user,
        network=network,
        defaults={"description": description, "expires_at": expires_at},
    )
    return allowed


@transaction.atomic
def create_user(
    username: str, email: str = "", password: str | None = None, is_staff: bool = False
) -> AbstractUser:
    user = User(username=username, email=email, is_staff=is_staff, is_superuser=is_staff)
    if password:
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    return user


def deactivate_user(user: AbstractUser) -> None:
    """Lock a user out: no login, and every token stops working. Their jobs stay on record."""
    user.is_active = False
    user.save(update_fields=["is_active"])
    ApiToken.objects.filter(user=user).delete()
