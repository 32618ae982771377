"""Where the gateway's sessions run: the workers of jobs on the configured backend.

A :class:`JobTarget` is what the gateway needs of a backend: whether a job's worker is
there to enter, a process started in it (a shell, a command, the SFTP server) and a TCP
connection to a port of the job's. The local backend's workers are entered with the
confinement their init recorded (``LocalTarget``); Kubernetes pods with the exec and
port-forward APIs (``backend.gateway.kubernetes``).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Protocol, cast

import asyncssh
from asyncssh.forward import SSHForwarder

from backend.gateway.access import Admission
from backend.gateway.ports import LOOPBACK_NAMES, Listener, NotTheJobs, connect, job_listener
from backend.gateway.processes import JobProcess, Output, session_confinement

LOOPBACK = tuple(LOOPBACK_NAMES)  # the names a client may forward to
# A job is running once deployed; its workers' containers may take this long to start.
CONTAINER_START_WAIT_SECONDS = 30.0


class Unavailable(Exception):
    """The worker is not there (any more) to start a process in."""


class SessionProcess(Protocol):
    async def write(self, data: bytes) -> None: ...
    def close_input(self) -> None: ...
    def resize(self, columns: int, rows: int) -> None: ...
    def signal(self, signum: int) -> None: ...
    async def wait(self) -> int: ...
    def close(self) -> None: ...


class JobTarget(Protocol):
    unreachable: str  # why no job can be reached ("" when they can)

    def available(self, admission: Admission) -> bool:
        """Whether the admitted worker runs, to be entered (called in a thread)."""

    async def start(
        self,
        admission: Admission,
        argv: list[str],
        env: dict[str, str],
        stdout: Output,
        stderr: Output,
        tty: tuple[int, int] | None,
    ) -> SessionProcess:
        """``argv`` started in the worker with the job's environment and ``env`` over it,
        on a terminal of (columns, rows) or on pipes; raises Unavailable."""

    def listener(self, job_id: str, host: str, port: int, rank: int = 0) -> Listener:
        """Where on this host the job's own server listens on ``port`` at ``host``
        (``localhost``, ``127.0.0.1``, ``::1``), for the gateway's forwards and the
        endpoint proxy; raises NotTheJobs saying why not (called in a thread)."""

    async def forward(
        self, admission: Admission, conn: asyncssh.SSHServerConnection, host: str, port: int
    ) -> asyncssh.SSHTCPSession:
        """A connection to ``port`` of the job's worker; raises asyncssh.ChannelOpenError
        saying why not."""


def refused(message: str) -> asyncssh.ChannelOpenError:
    return asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, message)


class Forwarder(SSHForwarder):
    """asyncssh's forwarder (one on the channel, its peer on the TCP connection), closed
    as soon as both directions have ended, whichever ends last.

    asyncssh's own closes only when the TCP side ends last (asyncio closes a transport
    whose protocol's ``eof_received`` answers False). When the client's EOF comes last (a
    server that answers and closes before the client's EOF reaches the gateway: ``ssh -W``
    under load), the channel's False only sends an EOF already sent, the half-closed TCP
    transport stays open, and so did the forward, until the client gave up."""

    def eof_received(self) -> bool:
        keep_open = super().eof_received()
        if not keep_open:  # the peer had ended too
            self.close()
        return keep_open


async def forwarded(
    host: str = "", port: int = 0, sock: socket.socket | None = None
) -> asyncssh.SSHTCPSession:
    """The channel's end of a forward to ``host``:``port`` (or over the connected
    ``sock``); raises ChannelOpenError when the connection cannot be made."""
    loop = asyncio.get_running_loop()
    try:
        if sock is None:
            _, peer = await loop.create_connection(Forwarder, host, port)
        else:
            _, peer = await loop.create_connection(Forwarder, sock=sock)
    except OSError as error:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(error)) from error
    return cast(asyncssh.SSHTCPSession, Forwarder(peer))  # a session of asyncssh's kind


class LocalTarget:
    """Workers of the local backend, on this host."""

    unreachable = ""

    def __init__(self, backend) -> None:
        self.backend = backend

    def available(self, admission: Admission) -> bool:
        login = admission.login
        confinement = self.backend.session_confinement(
            login.job_id, login.rank, CONTAINER_START_WAIT_SECONDS
        )
        return confinement is not None

    async def start(self, admission, argv, env, stdout, stderr, tty) -> JobProcess:
        login = admission.login
        confinement = self.backend.session_confinement(login.job_id, login.rank)
        if confinement is None:
            raise Unavailable(login.job_id)
        process = JobProcess()
        await process.start(session_confinement(confinement, env), argv, stdout, stderr, tty)
        return process

    def listener(self, job_id: str, host: str, port: int, rank: int = 0) -> Listener:
        confinement = self.backend.session_confinement(job_id, rank, CONTAINER_START_WAIT_SECONDS)
        if confinement is None:
            raise NotTheJobs(f"worker {rank} of job {job_id} is not running")
        pids = self.backend.job_pids(job_id)
        netns = self.backend.job_namespace(job_id) or ""
        return job_listener(job_id, host, port, pids, confinement.uid, netns)

    async def forward(self, admission, conn, host, port):
        login = admission.login
        try:
            listener = await asyncio.to_thread(self.listener, login.job_id, host, port, login.rank)
        except NotTheJobs as refusal:
            raise refused(str(refusal)) from refusal
        if not listener.netns:
            return await forwarded(listener.address, listener.port)
        try:  # in the job's network namespace: its loopback is the job's own
            sock = await asyncio.to_thread(connect, listener)
        except OSError as error:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(error)) from error
        return await forwarded(sock=sock)


class NoTarget:
    """A backend whose jobs the gateway cannot enter: every connection is told why."""

    def __init__(self, backend_name: str) -> None:
        self.unreachable = f"the SSH gateway cannot reach jobs on the {backend_name} backend"

    def available(self, admission: Admission) -> bool:
        return False

    async def start(self, admission, argv, env, stdout, stderr, tty):
        raise Unavailable(admission.login.job_id)

    def listener(self, job_id: str, host: str, port: int, rank: int = 0) -> Listener:
        raise NotTheJobs(self.unreachable)

    async def forward(self, admission, conn, host, port):
        raise refused(self.unreachable)
