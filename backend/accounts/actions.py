"""Changes to users and their credentials; each one atomic."""

from __future__ import annotations

import copy
import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from backend.accounts.models import (
    AllowedIp,
    AllowedIpEvent,
    AllowedIpEventKind,
    ApiToken,
    SshKey,
    UnixAccount,
)
from backend.accounts.unix import NoUnixAccount, account_errors, host_account_for
from backend.accounts.validators import parse_allowed_network, parse_ssh_public_key

TOKEN_PREFIX = "ty_"


def token_digest(plaintext: str) -> str:
    """Tokens are 256 random bits, so one SHA-256 round is as strong as a slow hash here."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


@transaction.atomic
def create_api_token(user: User, name: str) -> tuple[ApiToken, str]:
    """Create a token and return it with its plaintext, which is never stored or shown again."""
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=plaintext[:10], digest=token_digest(plaintext)
    )
    return token, plaintext


def revoke_api_token(token: ApiToken) -> None:
    token.delete()  # also forgets it in this process's token cache (AccountsConfig.ready)


class TokenCache:
    """Recent token lookups of this process, each kept ``ttl`` seconds (at most ``size``).

    A token is checked on every API request; reusing a lookup for a few seconds saves a
    query on each, at the price that a token revoked in another process still works there
    until its entry expires (``TRAINYARD_TOKEN_CACHE_SECONDS``).
    """

    def __init__(self, size: int = 4096, clock=time.monotonic) -> None:
        self.size = size
        self.clock = clock
        self._entries: OrderedDict[str, tuple[float, User]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str) -> User | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if entry[0] <= self.clock():
                del self._entries[digest]
                return None
            return entry[1]

    def put(self, digest: str, user: User, ttl: float) -> None:
        with self._lock:
            self._entries[digest] = (self.clock() + ttl, user)
            self._entries.move_to_end(digest)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self, digest: str) -> None:
        with self._lock:
            self._entries.pop(digest, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


token_cache = TokenCache()


def user_for_token(plaintext: str) -> User | None:
    """The active user a token belongs to, noting when it was last used."""
    digest = token_digest(plaintext)
    ttl = settings.TRAINYARD_TOKEN_CACHE_SECONDS
    if ttl > 0:
        cached = token_cache.get(digest)
        if cached is not None:
            return copy.copy(cached)
    user = _lookup_token_user(digest)
    if user is not None and ttl > 0:
        token_cache.put(digest, copy.copy(user), ttl)
    return user


def _lookup_token_user(digest: str) -> User | None:
    try:
        token = ApiToken.objects.select_related("user").get(digest=digest)
    except ApiToken.DoesNotExist:
        return None
    if not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=5):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


def add_ssh_key(user: User, public_key: str, name: str = "") -> SshKey:
    """Validate and store a public key; raise ValueError for a bad key, or one already
    added by anyone (one fingerprint, one user: the gateway knows users by their keys)."""
    parsed = parse_ssh_public_key(public_key)
    holder = SshKey.objects.filter(fingerprint=parsed.fingerprint).values_list("user_id", flat=True)
    taken = ValueError(
        f"This key ({parsed.fingerprint}) belongs to another account; each key may belong to "
        "one user only. Make a key of your own (ssh-keygen -t ed25519)."
    )
    for user_id in holder:
        if user_id == user.pk:
            raise ValueError(f"You already added this key ({parsed.fingerprint}).")
        raise taken
    try:
        with transaction.atomic():
            return SshKey.objects.create(
                user=user,
                name=name or parsed.comment[:100],
                key_type=parsed.key_type,
                bits=parsed.bits,
                public_key=parsed.public_key,
                fingerprint=parsed.fingerprint,
            )
    except IntegrityError:  # added at the same moment by someone (or by this user)
        raise taken from None


@transaction.atomic
def remove_ssh_key(key: SshKey) -> None:
    """Forget the key: the SSH gateway no longer lets it in."""
    key.delete()


def default_allowed_ip_expiry() -> datetime:
    return timezone.now() + timedelta(days=settings.TRAINYARD_ALLOWED_IP_DAYS)


@transaction.atomic
def add_allowed_ip(
    user: User,
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
    allowed, created = AllowedIp.objects.update_or_create(
        user=user,
        network=network,
        defaults={"description": description, "expires_at": expires_at},
    )
    AllowedIpEvent.objects.create(
        user=user,
        network=network,
        kind=AllowedIpEventKind.ADDED if created else AllowedIpEventKind.RENEWED,
        expires_at=expires_at,
    )
    return allowed


@transaction.atomic
def remove_allowed_ip(allowed: AllowedIp) -> None:
    """The user withdraws a network; the enforcement points drop it at the next reconcile
    (the SSH gateway, which reads the database, at once)."""
    AllowedIpEvent.objects.create(
        user=allowed.user, network=allowed.network, kind=AllowedIpEventKind.REMOVED
    )
    allowed.delete()


@transaction.atomic
def expire_allowed_ips(now: datetime | None = None) -> list[AllowedIpEvent]:
    """Delete every allowed network past its expiry, each with an "expired" event."""
    moment = now or timezone.now()
    expired = list(AllowedIp.objects.select_for_update().filter(expires_at__lte=moment))
    events = AllowedIpEvent.objects.bulk_create(
        AllowedIpEvent(
            user_id=allowed.user_id,
            network=allowed.network,
            kind=AllowedIpEventKind.EXPIRED,
            at=moment,
            expires_at=allowed.expires_at,
        )
        for allowed in expired
    )
    AllowedIp.objects.filter(pk__in=[allowed.pk for allowed in expired]).delete()
    return events


@transaction.atomic
def create_user(
    username: str, email: str = "", password: str | None = None, is_staff: bool = False
) -> User:
    """A new user. Their Unix account is found or provisioned on their first submission
    (``unix_account_of``), so that nobody who never runs a job gets one on the hosts."""
    user = User(username=username, email=email, is_staff=is_staff, is_superuser=is_staff)
    if password:
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    return user


def unix_account_of(user: User) -> UnixAccount:
    """The user's Unix account; a user without one gets the one the policy finds or
    provisions (``TRAINYARD_UNIX_ACCOUNTS``), stored. Raises NoUnixAccount saying why
    there is none."""
    account = UnixAccount.objects.filter(user=user).first()
    if account is not None:
        return account
    uid, gid, name, provisioned = host_account_for(user.get_username())
    errors = account_errors(uid, gid, name)
    if errors:
        reasons = " ".join(message for messages in errors.values() for message in messages)
        raise NoUnixAccount(f"The Unix account {name} cannot run jobs: {reasons}")
    taken = UnixAccount.objects.filter(Q(uid=uid) | Q(unix_name=name)).exclude(user=user)
    holder = taken.select_related("user").first()
    if holder is not None:
        raise NoUnixAccount(
            f"The Unix account {name} (uid {uid}) is already {holder.user.get_username()}'s; "
            "ask a cluster admin to set yours."
        )
    try:
        with transaction.atomic():
            return UnixAccount.objects.create(
                user=user, uid=uid, gid=gid, unix_name=name, provisioned=provisioned
            )
    except IntegrityError:  # a concurrent submission of the same user stored it first
        account = UnixAccount.objects.filter(user=user).first()
        if account is None:
            raise NoUnixAccount(f"The Unix account {name} is taken; ask a cluster admin.") from None
        return account


@transaction.atomic
def set_unix_account(user: User, uid: int, gid: int, unix_name: str) -> UnixAccount:
    """A cluster admin sets the account the user's jobs run as (checked by the caller)."""
    account, _ = UnixAccount.objects.update_or_create(
        user=user, defaults={"uid": uid, "gid": gid, "unix_name": unix_name, "provisioned": False}
    )
    return account


def remove_unix_account(user: User) -> None:
    """Forget the mapping (the host's account stays); the user's next submission finds or
    provisions one again by the policy."""
    UnixAccount.objects.filter(user=user).delete()


def deactivate_user(user: User) -> None:
    """Lock a user out: no login, and every token stops working. Their jobs stay on record."""
    user.is_active = False
    user.save(update_fields=["is_active"])
    ApiToken.objects.filter(user=user).delete()


def record_ssh_session(
    login: str, job_id: str, address: str, outcome: str, message: str = "", user_id=None
) -> None:
    """One connection to the SSH gateway: let in, refused (and why) or closed."""
    from backend.accounts.models import SshSessionEvent

    SshSessionEvent.objects.create(
        user_id=user_id,
        login=login[:200],
        job_id=job_id[:16],
        address=address[:50],
        outcome=outcome,
        message=message,
    )
