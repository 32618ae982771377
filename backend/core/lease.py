"""One job manager at a time: a Redis lease, and a fencing token checked in the database.

The lease is taken without waiting; whoever does not get it asks the holder to run once
more. Each lease carries a token larger than any before it; applying decisions records
the token in the database and refuses a smaller one, so a job manager that stalled past
its lease (and so may hold a stale snapshot) can no longer change anything.

The database is the source of truth for tokens too: taking a lease first raises the
Redis counter to the last token applied, so a Redis that lost its data (restarted empty,
failed over to a lagging replica, restored from an old dump) issues a larger token at
once rather than after as many passes as the system ran before.

The lease's TTL is short and a thread renews it while its holder works (``kept``), so a
holder killed mid-pass frees it within one TTL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from backend.core.models import SchedulerFence
from backend.core.redis import redis_client, redis_key


def lease_key(name: str) -> str:
    """The Redis key that holds the lease called ``name`` while someone has it."""
    return redis_key(name, "lease")


logger = logging.getLogger(__name__)

# Raise the counter to at least ARGV[1] (the database's last token), then take the next.
_NEXT_TOKEN = """
local current = tonumber(redis.call('get', KEYS[1]) or '0') or 0
local floor = tonumber(ARGV[1])
if current < floor then redis.call('set', KEYS[1], floor) end
return redis.call('incr', KEYS[1])
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""


class LeaseLost(RuntimeError):
    """A newer job manager has taken over; this one's decisions must not be applied."""


@dataclass(frozen=True)
class Lease:
    name: str
    token: int
    ttl_ms: int
    lost: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def renew(self) -> bool:
        client = redis_client()
        return bool(client.eval(_RENEW, 1, lease_key(self.name), self.token, self.ttl_ms))

    def release(self) -> None:
        redis_client().eval(_RELEASE, 1, lease_key(self.name), self.token)

    @contextmanager
    def kept(self) -> Iterator[Lease]:
        """Renew the lease every third of its TTL while the block runs; ``lost`` is set
        when a renewal finds it gone (taken over, or Redis lost it)."""
        done = threading.Event()

        def keep() -> None:
            while not done.wait(self.ttl_ms / 3000):
                try:
                    if not self.renew():
                        self.lost.set()
                        return
                except Exception:  # Redis unreachable: the next renewal tries again
                    logger.warning("Could not renew the %s lease", self.name, exc_info=True)

        keeper = threading.Thread(target=keep, name=f"{self.name}-lease", daemon=True)
        keeper.start()
        try:
            yield self
        finally:
            done.set()
            keeper.join()

    def fence(self) -> None:
        """Inside the transaction that applies decisions: record this lease's token, or
        raise LeaseLost when a newer one has already applied decisions."""
        now = timezone.now()
        updated = SchedulerFence.objects.filter(name=self.name, token__lte=self.token).update(
            token=self.token, applied_at=now
        )
        if updated:
            return
        if SchedulerFence.objects.filter(name=self.name).exists():
            raise LeaseLost(f"{self.name}: token {self.token} is older than the last applied")
        try:
            with transaction.atomic():
                SchedulerFence.objects.create(name=self.name, token=self.token, applied_at=now)
        except IntegrityError as error:  # created concurrently by another job manager
            raise LeaseLost(f"{self.name}: another job manager applied first") from error


def last_applied_token(name: str) -> int:
    """The largest token that has applied decisions (0 before the first)."""
    token = SchedulerFence.objects.filter(name=name).values_list("token", flat=True).first()
    return token or 0


def next_token(name: str) -> int:
    """A token larger than any issued before, in Redis or recorded in the database."""
    floor = last_applied_token(name)
    return int(redis_client().eval(_NEXT_TOKEN, 1, redis_key(name, "fence"), floor))


def acquire_lease(name: str, ttl_ms: int) -> Lease | None:
    """Take the lease if nobody holds it; never waits."""
    client = redis_client()
    token = next_token(name)
    if client.set(lease_key(name), token, nx=True, px=ttl_ms):
        return Lease(name, token, ttl_ms)
    return None
