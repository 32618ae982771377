"""The cluster backend this installation uses (``TRAINYARD_BACKEND``), one per process."""

from __future__ import annotations

import functools

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from jobmanager.backends import ClusterBackend
from jobmanager.backends.memory import MemoryBackend


@functools.cache
def _backend(name: str, memory_state: str, log_dir: str) -> ClusterBackend:
    if name == "memory":
        return MemoryBackend(state_path=memory_state, log_dir=log_dir)
    raise ImproperlyConfigured(
        f"TRAINYARD_BACKEND={name!r} is not available; this version has: memory."
    )


def get_backend() -> ClusterBackend:
    return _backend(
        settings.TRAINYARD_BACKEND,
        str(settings.TRAINYARD_MEMORY_BACKEND_STATE),
        str(settings.TRAINYARD_LOG_DIR),
    )
