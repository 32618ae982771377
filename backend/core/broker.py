"""Riding out a Redis broker outage: work-arounds for kombu's closed-channel errors.

When the broker connection drops, Celery closes the channel, which puts the messages a
worker had taken but not acknowledged back on their queues (``restore_unacked``), and
tasks finishing meanwhile acknowledge theirs. On a channel whose connection is already
closed, kombu (5.7.0, pinned) fails there with ``AttributeError: 'NoneType' object has
no attribute 'hostname'`` (or ``'client'``), which Celery treats as unrecoverable: the
worker exits. Patched, a closed channel raises a connection error instead, which Celery
handles (it logs it and reconnects); the messages stay in Redis's unacknowledged set,
from which kombu restores them after the visibility timeout (every task is idempotent,
and the job manager hands out again any deployment it lost meanwhile).
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger(__name__)


def patch_kombu_redis() -> None:
    import redis
    from kombu.transport import redis as kombu_redis

    if getattr(kombu_redis.QoS.restore_unacked, "trainyard_patched", False):
        return
    connparams = kombu_redis.Channel._connparams

    @functools.wraps(connparams)
    def _connparams(self, asynchronous=False):
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection is closed")
        return connparams(self, asynchronous=asynchronous)

    kombu_redis.Channel._connparams = _connparams  # type: ignore[method-assign]  # the patch

    original = kombu_redis.QoS.restore_unacked
    errors = (AttributeError, *kombu_redis.get_redis_error_classes()[0])

    @functools.wraps(original)
    def restore_unacked(self, client=None):
        try:
            return original(self, client)
        except errors as error:
            logger.warning(
                "Could not put %d unacknowledged messages back (the broker is gone: %r); "
                "they are restored after the visibility timeout.",
                len(self._delivered), error,
            )  # fmt: skip
            self._delivered.clear()

    # A mark on the patched method, so that a second call patches nothing.
    restore_unacked.trainyard_patched = True  # type: ignore[attr-defined]
    kombu_redis.QoS.restore_unacked = restore_unacked  # type: ignore[method-assign]  # the patch
