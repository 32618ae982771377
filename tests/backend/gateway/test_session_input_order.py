"""A session's standard input reaches the command whole and in order, and is closed only
after its last byte, whatever arrives while the command starts and takes what came first.

The gateway buffers what the client sends before the command runs. Input and the end of
input that arrive while that buffer is still being written must wait their turn: a 100 kB
``ssh ... 'wc -c' < file`` through a loaded gateway counted 98,304 bytes, the rest dropped
by a close that overtook it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from backend.gateway import server


class SlowProcess:
    """A session process that takes its first input only when let go."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.closed_after: int | None = None
        self.let_go = asyncio.Event()

    async def write(self, data: bytes) -> None:
        await self.let_go.wait()
        if self.closed_after is None:  # what comes after the close is lost, as on a pipe
            self.received.append(data)

    def close_input(self) -> None:
        self.closed_after = len(self.received)

    async def wait(self) -> int:
        await asyncio.sleep(0)
        return 0

    def close(self) -> None:
        pass

    def resize(self, columns: int, rows: int) -> None:
        pass


class Channel:
    def __init__(self) -> None:
        self.code: int | None = None

    def get_environment(self) -> dict[str, str]:
        return {}

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def write(self, data: bytes) -> None:
        pass

    def write_stderr(self, data: bytes) -> None:
        pass

    def exit(self, code: int) -> None:
        self.code = code


def exec_session(
    process: SlowProcess, channel: Channel, started: asyncio.Event
) -> server.JobSession:
    """A session running ``wc -c`` through a gateway connection whose target starts
    ``process`` (setting ``started``), the job admitted."""

    async def start(*args, **kwargs):
        started.set()
        return process

    async def admitted():
        return SimpleNamespace(login=SimpleNamespace(job_id="J"))

    connection = SimpleNamespace(
        admitted=admitted,
        target=SimpleNamespace(start=start),
        ssh=SimpleNamespace(get_extra_info=lambda name: None),
        sessions=set(),
    )
    session = server.JobSession(connection)  # type: ignore[arg-type]
    session.connection_made(channel)  # type: ignore[arg-type]
    session.exec_requested("wc -c")
    return session


def test_input_arriving_while_the_first_is_written_follows_it_and_the_eof_comes_last(monkeypatch):
    monkeypatch.setattr(server.access, "still_running", lambda admission: True)

    async def scenario() -> tuple[SlowProcess, Channel]:
        process, channel, started = SlowProcess(), Channel(), asyncio.Event()
        session = exec_session(process, channel, started)
        session.data_received(b"first ", None)  # before the command runs: buffered
        session.session_started()
        await started.wait()
        await asyncio.sleep(0)  # the session now writes what it buffered, and waits
        session.data_received(b"second ", None)
        session.data_received(b"third", None)
        session.eof_received()
        process.let_go.set()
        assert session.task is not None
        await asyncio.wait_for(session.task, 5)
        if session.writing is not None:
            await session.writing
        return process, channel

    process, channel = asyncio.run(scenario())

    assert b"".join(process.received) == b"first second third"
    assert process.closed_after == len(process.received)
    assert channel.code == 0


def test_the_eof_waits_for_the_input_being_written_once_the_command_runs(monkeypatch):
    """Once the command takes input directly, the last chunk may still be on its way to
    the pipe when the client's end of input arrives: the close waits for it."""
    monkeypatch.setattr(server.access, "still_running", lambda admission: True)

    async def scenario() -> SlowProcess:
        process, channel = SlowProcess(), Channel()
        process.let_go.set()  # the buffered part (none) is written at once
        session = exec_session(process, channel, asyncio.Event())
        session.session_started()
        while not session.input_open:
            await asyncio.sleep(0)
        process.let_go.clear()  # the next write waits in the pipe's drain
        session.data_received(b"last chunk", None)
        session.eof_received()  # in the same read from the client's socket
        process.let_go.set()
        assert session.task is not None
        await asyncio.wait_for(session.task, 5)
        if session.writing is not None:
            await session.writing
        return process

    process = asyncio.run(scenario())

    assert b"".join(process.received) == b"last chunk"
    assert process.closed_after == 1
