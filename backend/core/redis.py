"""The Redis client for locks and triggers: REDIS_URL, or the embedded server's socket."""

from __future__ import annotations

import functools

import redis
from django.conf import settings

SOCKET_SCHEME = "redis+socket://"  # how Celery (kombu) names a Unix socket


@functools.cache
def _client_for(url: str) -> redis.Redis:
    if url.startswith(SOCKET_SCHEME):
        return redis.Redis(unix_socket_path=url[len(SOCKET_SCHEME) :], socket_timeout=5)
    return redis.Redis.from_url(url, socket_timeout=5)


def redis_client() -> redis.Redis:
    return _client_for(settings.REDIS_URL or f"{SOCKET_SCHEME}{settings.EMBEDDED_REDIS_SOCKET}")


def redis_key(*parts: str) -> str:
    """A key in Trainyard's namespace (``TRAINYARD_REDIS_PREFIX``), so that several
    installations, or test runs, can share one Redis."""
    return ":".join((settings.TRAINYARD_REDIS_PREFIX, *parts))
