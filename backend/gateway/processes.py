"""Processes started inside a job's worker on this host, for the gateway's sessions.

Each process is started through ``session_enter`` (root, isolated Python), which confines
it as the worker's init confined the worker's command: the owner's account, the job's
cgroup or rlimits, ``no_new_privs``, the working directory and the job's environment. It
runs on a terminal (a pty pair whose window size follows the client's) or on pipes.
``JobProcess.spawn`` starts a command that enters the job by itself the same way (the
Slurm target's ``srun`` steps).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import struct
import sys
import termios
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from jobmanager.backends.confine import Confinement

SESSION_ENTER = Path(__file__).resolve().parents[2] / "jobmanager/backends/session_enter.py"
# The helper's own environment: nothing of the job's reaches a process that is still root.
HELPER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
READ_SIZE = 256 * 1024

# A coroutine function taking output as it comes (run from threads too, so a coroutine).
Output = Callable[[bytes], Coroutine[Any, Any, None]]


def set_window_size(fd: int, columns: int, rows: int) -> None:
    """Tell the terminal its size; the kernel sends SIGWINCH to its foreground group."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


class JobProcess:
    """One confined process of a session, its input and output bridged to the caller's
    coroutines; ``wait()`` returns its exit status as a shell reports it."""

    def __init__(self) -> None:
        self.process: asyncio.subprocess.Process | None = None
        self.master: int | None = None  # the terminal's master side, with a tty
        self._pending_input = bytearray()
        self._tasks: list[asyncio.Task] = []

    async def start(
        self,
        confinement: Confinement,
        argv: list[str],
        stdout: Output,
        stderr: Output,
        tty: tuple[int, int] | None = None,
    ) -> None:
        """Start ``argv`` confined as ``confinement`` (whose env is the session's), on a
        terminal of ``tty`` = (columns, rows) or on pipes; its output goes to the
        coroutines as it comes."""
        reader, writer = os.pipe()
        helper = [sys.executable, "-I", "-S", str(SESSION_ENTER), "--fd", str(reader)]
        try:
            command = [*helper, *(["--tty"] if tty is not None else []), "--", *argv]
            await self.spawn(command, HELPER_ENV, stdout, stderr, tty, pass_fds=(reader,))
        finally:
            os.close(reader)
        payload = json.dumps(confinement.to_json()).encode()
        await asyncio.get_running_loop().run_in_executor(None, _write_all, writer, payload)

    async def spawn(
        self,
        command: list[str],
        env: dict[str, str],
        stdout: Output,
        stderr: Output,
        tty: tuple[int, int] | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        """Start ``command`` as it is (on a terminal of ``tty`` = (columns, rows), whose
        controlling process it makes itself, or on pipes in a session of its own); its
        output goes to the coroutines as it comes."""
        if tty is not None:
            master, slave = os.openpty()
            self.master = master
            set_window_size(master, *tty)
            self.process = await asyncio.create_subprocess_exec(
                *command, stdin=slave, stdout=slave, stderr=slave,
                env=env, pass_fds=pass_fds, close_fds=True,
            )  # fmt: skip
            os.close(slave)
            os.set_blocking(master, False)
            self._tasks.append(asyncio.ensure_future(self._pump_terminal(master, stdout)))
            return
        self.process = process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, pass_fds=pass_fds,
            start_new_session=True,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None  # PIPE
        self._tasks.append(asyncio.ensure_future(self._pump(process.stdout, stdout)))
        self._tasks.append(asyncio.ensure_future(self._pump(process.stderr, stderr)))

    async def _pump(self, stream: asyncio.StreamReader, output: Output) -> None:
        while chunk := await stream.read(READ_SIZE):
            await output(chunk)

    async def _pump_terminal(self, master: int, output: Output) -> None:
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(master, readable.set)
        try:
            while True:
                await readable.wait()
                readable.clear()
                try:
                    chunk = os.read(master, READ_SIZE)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: every process on the terminal has closed it
                    return
                if not chunk:
                    return
                await output(chunk)
        finally:
            # Only while it is still this terminal's: once closed, its number may be
            # another's, and the registration went with it (close() removed it).
            if self.master == master:
                loop.remove_reader(master)

    async def write(self, data: bytes) -> None:
        if self.master is not None:
            self._pending_input += data
            await self._flush_terminal(self.master)
        elif self.process and self.process.stdin and not self.process.stdin.is_closing():
            self.process.stdin.write(data)
            with contextlib.suppress(ConnectionError):
                await self.process.stdin.drain()

    async def _flush_terminal(self, master: int) -> None:
        loop = asyncio.get_running_loop()
        while self._pending_input and self.master == master:
            try:
                written = os.write(master, self._pending_input)
            except BlockingIOError:
                ready = loop.create_future()
                loop.add_writer(master, ready.set_result, None)
                try:
                    await ready
                finally:
                    if self.master == master:
                        loop.remove_writer(master)
                continue
            except OSError:
                self._pending_input.clear()
                return
            del self._pending_input[:written]

    def close_input(self) -> None:
        if self.master is None and self.process and self.process.stdin:
            self.process.stdin.close()

    def resize(self, columns: int, rows: int) -> None:
        if self.master is not None:
            with contextlib.suppress(OSError):
                set_window_size(self.master, columns, rows)

    def signal(self, signum: int) -> None:
        """Signal the session's process group (the shell and what it runs)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)

    async def wait(self) -> int:
        """The exit status once the process has exited and its output is drained."""
        if self.process is None:
            raise RuntimeError("wait() before start()")
        code = await self.process.wait()
        if self.master is not None:
            # Whatever it printed last is still in the terminal; background processes
            # that keep it open do not keep the session (as with OpenSSH's sshd).
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._tasks), timeout=0.2)
        else:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        return 128 - code if code < 0 else code

    def close(self) -> None:
        """Hang up: SIGHUP to the session's group while its process still runs (the
        client went away), and closing the terminal, the kernel's SIGHUP to what runs
        on it, as with OpenSSH's sshd. What a finished command left in the background
        (``setsid server &``, as VS Code's bootstrap does) is not signalled. Called on
        the event loop."""
        if self.process is not None and self.process.returncode is None:
            self.signal(signal.SIGHUP)
        for task in self._tasks:
            task.cancel()
        if self.master is not None:
            # Unregistered before it is closed: the loop would otherwise keep a stale
            # registration under a number the next terminal is given.
            loop = asyncio.get_running_loop()
            loop.remove_reader(self.master)
            loop.remove_writer(self.master)
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None


def _write_all(descriptor: int, payload: bytes) -> None:
    try:
        with os.fdopen(descriptor, "wb") as pipe:
            pipe.write(payload)
    except BrokenPipeError:
        pass  # the helper died before reading: its exit status says so


def session_confinement(confinement: Confinement, extra_env: dict[str, str]) -> Confinement:
    return confinement.replace(env=confinement.env | extra_env)
