"""The SSH gateway: OpenSSH clients (and VS Code Remote-SSH) into running jobs.

One asyncssh server. A connection authenticates with one of the named user's registered
public keys (nothing else is offered); once the key is proven, :func:`access.admit`
decides whether it may go on. A refused connection gets its one-line reason on standard
error of its first session (exit status 1), or as the reason of the disconnect when it
opens none, and is closed. An admitted one may open sessions (a shell on a terminal, a
command, the ``sftp`` subsystem), each a process confined in the job's worker
(:mod:`backend.gateway.processes`), and forward TCP connections to ports the job's own
processes listen on (``ssh -L``). When the job stops running, its connections are told
so and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Mapping

import asyncssh
from asgiref.sync import sync_to_async
from django.conf import settings

from backend.accounts.models import SshSessionOutcome
from backend.gateway import access
from backend.gateway.access import LOGIN_HELP, Admission, Login, Refused
from backend.gateway.targets import LOOPBACK, JobTarget, SessionProcess, Unavailable

logger = logging.getLogger(__name__)

# A session's shell is chosen where it runs (the job's image may have no bash): this
# POSIX sh picks /bin/bash when the job's root has it, else itself, as the user's SHELL.
PICK_SHELL = (
    "if [ -x /bin/bash ]; then SHELL=/bin/bash; else SHELL=/bin/sh; fi; export SHELL; "
    'exec "$SHELL" "$@"'
)
REFUSED_EXIT = 1
GONE_EXIT = 255  # what OpenSSH's client reports when the connection goes away
SIGNALS = {name: getattr(signal, f"SIG{name}") for name in ("INT", "TERM", "HUP", "KILL", "QUIT")}


def shell_argv(*arguments: str) -> list[str]:
    """The argv of a session's shell given ``arguments``: bash where the job has it, else sh."""
    return ["/bin/sh", "-c", PICK_SHELL, "sh", *arguments]


def in_thread(function):
    """Run a Django function in a worker thread (the ORM is synchronous)."""
    return sync_to_async(function, thread_sensitive=False)


class GatewayConnection(asyncssh.SSHServer):
    """One client connection: its login, its proven user, whether it was let in."""

    def __init__(self, target: JobTarget) -> None:
        self.target = target
        self.conn: asyncssh.SSHServerConnection | None = None
        self.address = ""
        self.login: Login | None = None
        self.user_id: int | None = None
        self.banners: set[str] = set()
        self.admission: asyncio.Future[Admission] | None = None
        self.sessions: set[JobSession] = set()
        self.watch: asyncio.Task | None = None

    @property
    def ssh(self) -> asyncssh.SSHServerConnection:
        """The client's connection, there from ``connection_made`` on."""
        if self.conn is None:
            raise RuntimeError("no connection yet")
        return self.conn

    # --- authentication --------------------------------------------------------------------

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        peer = conn.get_extra_info("peername") or ("", 0)
        self.address = str(peer[0])

    def connection_lost(self, exc: Exception | None) -> None:
        if self.watch is not None:
            self.watch.cancel()
        for session in list(self.sessions):
            session.hang_up()

    def begin_auth(self, username: str) -> bool:
        self.login = access.parse_login(username)
        if self.login is None:
            self._banner(f"trainyard: {username!r} is not a job login: {LOGIN_HELP}")
        return True

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        if self.login is None:
            return False
        fingerprint = key.get_fingerprint("sha256")
        user_id = await in_thread(access.key_holder)(self.login, fingerprint)
        if user_id is None:
            self._banner(
                f"trainyard: the key {fingerprint} is not one of "
                f"{self.login.username}'s registered SSH keys"
            )
            return False
        self.user_id = user_id
        return True

    def auth_completed(self) -> None:
        self.admission = asyncio.ensure_future(self._admit())

    def _banner(self, message: str) -> None:
        if message not in self.banners and self.conn is not None:
            self.banners.add(message)
            with contextlib.suppress(OSError):
                self.conn.send_auth_banner(message + "\r\n")

    async def _admit(self) -> Admission:
        try:
            admission = await in_thread(access.admit)(self.login, self.user_id, self.address)
            if not await asyncio.to_thread(self.target.available, admission):
                message = self.target.unreachable or (
                    f"worker {admission.login.rank} of job {admission.login.job_id} is not running"
                )
                await in_thread(access.record)(
                    self.login, self.address, SshSessionOutcome.REFUSED, message, self.user_id
                )
                raise Refused(message)
        except Refused as refusal:
            # A client that opens no session (ssh -N) hears why as the disconnect's reason.
            asyncio.get_running_loop().call_later(2, self._disconnect, str(refusal))
            raise
        self.watch = asyncio.ensure_future(self._watch(admission))
        return admission

    def _disconnect(self, message: str) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError, asyncssh.Error):
                self.conn.disconnect(asyncssh.DISC_BY_APPLICATION, f"trainyard: {message}")

    async def admitted(self) -> Admission | None:
        """The admission; None (the reason already on its way) when refused."""
        assert self.admission is not None  # sessions and forwards come after authentication
        try:
            return await self.admission
        except Refused:
            return None

    async def refusal(self) -> str:
        assert self.admission is not None  # sessions and forwards come after authentication
        try:
            await self.admission
        except Refused as refusal:
            return str(refusal)
        return ""

    async def _watch(self, admission: Admission) -> None:
        """Close every session, with a message, once the job stops running."""
        while True:
            await asyncio.sleep(settings.TRAINYARD_SSH_JOB_CHECK_SECONDS)
            running = await in_thread(access.still_running)(admission)
            if not running or not await asyncio.to_thread(self.target.available, admission):
                break
        message = f"job {admission.login.job_id} has ended"
        for session in list(self.sessions):
            session.end_with(message)
        await in_thread(access.record)(
            admission.login, self.address, SshSessionOutcome.CLOSED, message, self.user_id
        )
        self._disconnect(message)

    # --- sessions and forwarding -----------------------------------------------------------

    def session_requested(self) -> JobSession:
        return JobSession(self)

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int):
        return self._forward(dest_host, dest_port)

    async def _forward(self, dest_host: str, dest_port: int) -> asyncssh.SSHTCPSession:
        admission = await self.admitted()
        if admission is None:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, await self.refusal()
            )
        if dest_host not in LOOPBACK:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                f"only ports of job {admission.login.job_id} on localhost can be forwarded",
            )
        return await self.target.forward(admission, self.ssh, dest_host, dest_port)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False  # ssh -R would open a port on the gateway's host: never


class JobSession(asyncssh.SSHServerSession):
    """One session channel: a shell, a command or the SFTP subsystem, run in the job."""

    def __init__(self, connection: GatewayConnection) -> None:
        self.connection = connection
        self.chan: asyncssh.SSHServerChannel | None = None
        self.terminal: tuple[str, int, int] | None = None
        self.argv: list[str] | None = None
        self.command = ""
        self.process: SessionProcess | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.task: asyncio.Task | None = None
        # What the client sent before the process could take it, in order; the process
        # takes input directly only once that is written (``input_open``).
        self.input_buffer: list[bytes] = []
        self.input_closed = False
        self.input_open = False
        self.writing: asyncio.Future | None = None
        self.ended = False

    def connection_made(self, chan: asyncssh.SSHServerChannel) -> None:
        self.chan = chan
        self.connection.sessions.add(self)

    @property
    def channel(self) -> asyncssh.SSHServerChannel:
        """The session's channel, there from ``connection_made`` on."""
        if self.chan is None:
            raise RuntimeError("no channel yet")
        return self.chan

    def pty_requested(
        self, term_type: str, term_size: tuple, term_modes: Mapping[int, int]
    ) -> bool:
        columns, rows = term_size[0] or 80, term_size[1] or 24
        self.terminal = (term_type or "xterm", columns, rows)
        return True

    def shell_requested(self) -> bool:
        self.argv = shell_argv("-i") if self.terminal else shell_argv()
        return True

    def exec_requested(self, command: str) -> bool:
        self.command = command
        self.argv = shell_argv("-c", command)
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        if subsystem != "sftp":
            return False
        self.argv = [settings.TRAINYARD_SSH_SFTP_SERVER]
        self.terminal = None  # the protocol runs on pipes
        return True

    def session_started(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        admission = await self.connection.admitted()
        if admission is None:
            self.channel.write_stderr(f"trainyard: {await self.connection.refusal()}\r\n".encode())
            self._exit(REFUSED_EXIT)
            return
        # asyncssh starts a session once its shell, command or subsystem was accepted.
        assert self.argv is not None
        env = self._session_env()
        tty = (self.terminal[1], self.terminal[2]) if self.terminal else None
        try:
            self.process = process = await self.connection.target.start(
                admission,
                self.argv,
                env,
                self._output(self.channel.write),
                self._output(self.channel.write_stderr),
                tty,
            )
        except Unavailable:
            self.end_with(f"job {admission.login.job_id} has ended")
            return
        except OSError as error:
            self.channel.write_stderr(f"trainyard: cannot start the session: {error}\r\n".encode())
            self._exit(GONE_EXIT)
            return
        for data in self.input_buffer:  # what arrives meanwhile is appended, and written
            await process.write(data)
        self.input_buffer.clear()
        self.input_open = True
        if self.input_closed:
            process.close_input()
        code = await process.wait()
        process.close()
        if not await in_thread(access.still_running)(admission):
            # Killed with the job, maybe before the watch saw the job stop: say why.
            self.end_with(f"job {admission.login.job_id} has ended")
            return
        self._exit(code)

    def _session_env(self) -> dict[str, str]:
        conn = self.connection.ssh
        client = conn.get_extra_info("peername") or ("", 0)
        server = conn.get_extra_info("sockname") or ("", 0)
        env = {
            "SSH_CONNECTION": f"{client[0]} {client[1]} {server[0]} {server[1]}",
            "SSH_CLIENT": f"{client[0]} {client[1]} {server[1]}",
        }
        if self.terminal:
            env["TERM"] = self.terminal[0]
        for name, value in (self.channel.get_environment() or {}).items():
            if name == "LANG" or name.startswith("LC_"):  # as OpenSSH's AcceptEnv default
                env[name] = value
        return env

    def _output(self, write):
        async def send(chunk: bytes) -> None:
            await self.can_write.wait()
            if not self.ended:
                write(chunk)

        return send

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes, datatype: int | None) -> None:
        if self.process is None or not self.input_open:
            self.input_buffer.append(data)
            return
        self.channel.pause_reading()  # until the process has taken it: flow control
        self.writing = asyncio.ensure_future(self._write(self.process, data))

    async def _write(self, process: SessionProcess, data: bytes) -> None:
        try:
            await process.write(data)
        finally:
            if not self.ended:
                self.channel.resume_reading()

    def eof_received(self) -> bool:
        if self.process is None or not self.input_open:
            self.input_closed = True
        elif self.writing is not None and not self.writing.done():
            # The last input is still on its way to the pipe: the close must not overtake it.
            self.writing.add_done_callback(lambda _: self._close_input())
        else:
            self.process.close_input()
        return True

    def _close_input(self) -> None:
        if self.process is not None:
            self.process.close_input()

    def terminal_size_changed(self, width: int, height: int, pixwidth: int, pixheight: int):
        if self.terminal:
            self.terminal = (self.terminal[0], width, height)
        if self.process is not None:
            self.process.resize(width, height)

    def signal_received(self, signal_name: str) -> None:
        if self.process is not None and signal_name in SIGNALS:
            self.process.signal(SIGNALS[signal_name])

    def break_received(self, msec: int) -> bool:
        if self.process is not None:
            self.process.signal(signal.SIGINT)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.hang_up()

    def hang_up(self) -> None:
        self.ended = True
        self.can_write.set()
        self.connection.sessions.discard(self)
        if self.process is not None:
            self.process.close()

    def end_with(self, message: str) -> None:
        """Tell the client why the session ends, and end it."""
        if self.ended or self.chan is None:
            return
        with contextlib.suppress(OSError, asyncssh.Error):
            self.chan.write_stderr(f"\r\ntrainyard: {message}\r\n".encode())
        self._exit(GONE_EXIT)
        self.hang_up()

    def _exit(self, code: int) -> None:
        if self.ended:
            return
        self.ended = True
        self.connection.sessions.discard(self)
        with contextlib.suppress(OSError, asyncssh.Error):
            self.channel.exit(code)


async def start_server(
    target: JobTarget, host: str, port: int, host_key: asyncssh.SSHKey
) -> asyncssh.SSHAcceptor:
    return await asyncssh.create_server(
        lambda: GatewayConnection(target),
        host,
        port,
        server_host_keys=[host_key],
        encoding=None,
        allow_scp=False,  # legacy scp runs `scp -t` in the job, as a command
        agent_forwarding=False,
        x11_forwarding=False,
        line_editor=False,
        login_timeout=60,
        keepalive_interval=30,
    )
