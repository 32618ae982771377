"""Where the gateway's sessions run: the workers of jobs on the configured backend.

:class:`JobTarget` is what the gateway needs of a backend: the confinement of a running
worker (its account, directory, environment and limits, as its init recorded it) and
whether a port is one the job's processes listen on. The local backend provides both
from its state on this host.
"""

from __future__ import annotations

from typing import Protocol

from backend.gateway.access import Login
from backend.gateway.ports import listened_by
from jobmanager.backends.confine import Confinement


class JobTarget(Protocol):
    unreachable: str  # why no job can be reached ("" when they can)

    def confinement(self, login: Login) -> Confinement | None:
        """What a session into the login's worker must join; None when it is not running."""

    def listens(self, login: Login, port: int) -> bool:
        """Whether a process of the login's job listens on ``port`` (on loopback)."""


class LocalTarget:
    """Workers of the local backend, on this host."""

    unreachable = ""

    def __init__(self, backend) -> None:
        self.backend = backend

    def confinement(self, login: Login) -> Confinement | None:
        return self.backend.session_confinement(login.job_id, login.rank)

    def listens(self, login: Login, port: int) -> bool:
        return listened_by(port, self.backend.job_pids(login.job_id))


class NoTarget:
    """A backend whose jobs the gateway cannot enter: every connection is told why."""

    def __init__(self, backend_name: str) -> None:
        self.unreachable = f"the SSH gateway cannot reach jobs on the {backend_name} backend"

    def confinement(self, login: Login) -> Confinement | None:
        return None

    def listens(self, login: Login, port: int) -> bool:
        return False


def configured_target() -> JobTarget:
    """The target for TRAINYARD_BACKEND."""
    from backend.jobs.backends import get_backend
    from jobmanager.backends.local import LocalBackend

    backend = get_backend()
    if isinstance(backend, LocalBackend):
        return LocalTarget(backend)
    return NoTarget(backend.name)
