"""One job manager at a time: a Redis lease, and a fencing token checked in the database.

The lease is taken without waiting; whoever does not get it asks the holder to run once
more. Each lease carries a token larger than any before it; applying decisions records
the token in the database and refuses a smaller one, so a job manager that stalled past
its lease (and so may hold a stale snapshot) can no longer change anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from backend.core.redis import redis_client, redis_key
from backend.jobs.models import SchedulerFence

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

    def renew(self) -> bool:
        client = redis_client()
        return bool(client.eval(_RENEW, 1, redis_key(self.name, "lease"), self.token, self.ttl_ms))

    def release(self) -> None:
        redis_client().eval(_RELEASE, 1, redis_key(self.name, "lease"), self.token)

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


def acquire_lease(name: str, ttl_ms: int) -> Lease | None:
    """Take the lease if nobody holds it; never waits."""
    client = redis_client()
    token = int(client.incr(redis_key(name, "fence")))
    if client.set(redis_key(name, "lease"), token, nx=True, px=ttl_ms):
        return Lease(name, token, ttl_ms)
    return None
