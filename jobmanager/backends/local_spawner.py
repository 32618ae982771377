"""The resident spawner of local-backend inits: forks each worker's init from a process that
has already started, rather than starting a fresh interpreter for every worker.

    python -I -S jobmanager/backends/local_spawner.py --socket PATH

It loads ``local_init`` (by path, isolated, as the init itself runs) once, then listens on a
Unix stream socket (mode 0600, and only a peer of its own uid is served: whoever may ask
it may start processes as it). A request is the init's own arguments (as ``local_init``
takes them, with ``--go-fd`` and without ``--pid-file``) and the directory to run in, with
two descriptors passed along (``SCM_RIGHTS``): the read end of the deployer's go pipe and
the worker's log, the init's stdout and stderr until it opens the log itself. The spawner
forks the init and answers with its pid once the init leads a session of its own (so that
nothing sent to the spawner's process group can reach an init it named); it ignores
SIGCHLD, so that the kernel reaps its inits when they end and it never waits for one (one
fork a worker: a second, to leave the init without a parent as ``local_init --pid-file``
detaches, cost each worker 1-2 ms of CPU in page tables copied and torn down). The init
then runs exactly as one started with ``python local_init.py``: it
waits for ``go``, confines the command's process (the owner's account and groups,
``no_new_privs``, cgroup or rlimits, the working directory) and records its end.

``spawn`` is the deployer's side; it returns None when no spawner answers on the socket,
and the backend then starts the init as a process of its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import struct
import sys
from types import ModuleType
from typing import Any

HEADER = struct.Struct("!I")  # the request's length in bytes, then the request (JSON)
MAX_REQUEST = 64 * 1024 * 1024
PEER_CREDENTIALS = struct.Struct("3i")  # pid, uid, gid (SO_PEERCRED)


class SpawnError(Exception):
    """The spawner answered but could not start the init."""


# --- the deployer's side ------------------------------------------------------------------


def spawn(
    socket_path: str, init_args: list[str], cwd: str, go_fd: int, log_fd: int, timeout: float
) -> int | None:
    """The pid of an init started by the spawner on ``socket_path``, held on ``go_fd`` (the
    pipe's read end, which stays the caller's to close); None when no spawner listens there.
    Raises SpawnError when one answered without an init."""
    request = json.dumps({"args": init_args, "cwd": cwd}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        try:
            socket.send_fds(sock, [HEADER.pack(len(request))], [go_fd, log_fd])
            sock.sendall(request)
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = sock.recv(64)
                if not chunk:
                    break
                answer += chunk
        except OSError as error:
            raise SpawnError(f"the spawner on {socket_path} failed: {error}") from error
    text = answer.decode(errors="replace").strip()
    if not text.isdigit():
        raise SpawnError(text or f"the spawner on {socket_path} answered nothing")
    return int(text)


# --- the spawner --------------------------------------------------------------------------


def _load_init() -> ModuleType:
    """``local_init.py`` beside this file, loaded by path (it loads ``confine.py`` so)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "local_init.py")
    spec = importlib.util.spec_from_file_location("trainyard_local_init", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def listen(socket_path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)  # a dead spawner's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # never reachable by another account, not even for a moment
    try:
        listener.bind(socket_path)
    finally:
        os.umask(previous)
    listener.listen(128)
    return listener


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The request and the descriptors that came with it (closed here if it is refused)."""
    head, descriptors, _, _ = socket.recv_fds(connection, HEADER.size, 2)
    try:
        credentials = connection.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, PEER_CREDENTIALS.size
        )
        _, peer_uid, _ = PEER_CREDENTIALS.unpack(credentials)
        if peer_uid != os.geteuid():
            raise SpawnError(f"uid {peer_uid} may not start inits here")
        if len(head) != HEADER.size or len(descriptors) != 2:
            raise SpawnError("a request is its length, then itself, with two descriptors")
        (length,) = HEADER.unpack(head)
        if length > MAX_REQUEST:
            raise SpawnError(f"a request of {length} bytes is too long")
        body = bytearray()
        while len(body) < length:
            chunk = connection.recv(min(length - len(body), 1 << 20))
            if not chunk:
                raise SpawnError("the request was cut short")
            body += chunk
        request = json.loads(body)
        if not (
            isinstance(request, dict)
            and isinstance(request.get("cwd"), str)
            and isinstance(request.get("args"), list)
            and all(isinstance(argument, str) for argument in request["args"])
        ):
            raise SpawnError("a request names the init's arguments and its directory")
    except (SpawnError, ValueError, OSError):
        for descriptor in descriptors:
            os.close(descriptor)
        raise
    return request, descriptors


def _become_init(
    local_init: ModuleType,
    request: dict[str, Any],
    go_fd: int,
    log_fd: int,
    ready_fd: int,
    others: list[Any],
) -> None:
    """In the spawner's child, the init: leave the spawner's session, say so on
    ``ready_fd``, then run as ``local_init`` would, and exit with the command's code.
    Never returns."""
    code = local_init.CANNOT_RUN
    try:
        for sock in others:
            sock.close()
        # A session of its own, out of the spawner's process group, before the spawner
        # names it: killing the spawner's group (as run_trainyard does to a dead child's)
        # must never reach an init.
        os.setsid()
        os.write(ready_fd, b"1")
        os.close(ready_fd)
        # The spawner's SIGCHLD is ignored (its children reaped by the kernel): the init
        # waits for its own.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        os.chdir(request["cwd"])
        local_init.stdio_to(log_fd)
        code = local_init.main(["--go-fd", str(go_fd), *request["args"]])
    except SystemExit as exit_:  # a usage error: the code parse_args exits with
        code = exit_.code if isinstance(exit_.code, int) else local_init.CANNOT_RUN
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.write(2, f"trainyard-spawner: {error!r}\n".encode())
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(socket_path: str) -> None:
    """Answer requests, one at a time (each takes a fork), until killed."""
    local_init = _load_init()
    listener = listen(socket_path)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its inits are reaped by the kernel
    print(f"trainyard-spawner: listening on {socket_path}", flush=True)
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                request, (go_fd, log_fd) = _receive(connection)
            except (SpawnError, ValueError, OSError) as error:
                with contextlib.suppress(OSError):
                    connection.sendall(f"refused: {error}\n".encode())
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
            try:
                child = os.fork()
            except OSError as error:
                with contextlib.suppress(OSError):
                    connection.sendall(f"cannot fork: {error}\n".encode())
                child = None
            if child == 0:
                os.close(ready_read)
                others = [listener, connection]
                _become_init(local_init, request, go_fd, log_fd, ready_write, others)
            for descriptor in (go_fd, log_fd, ready_write):
                os.close(descriptor)
            with os.fdopen(ready_read, "rb") as ready:
                # Named once it leads its own session; nothing read: it died before that.
                started = child is not None and ready.read(1) == b"1"
            if child is not None:
                answer = f"{child}\n" if started else "refused: the init ended before it started\n"
                with contextlib.suppress(OSError):  # the deployer gone: the init sees no go
                    connection.sendall(answer.encode())


def main(argv: list[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) != 2 or arguments[0] != "--socket":
        print("usage: local_spawner --socket PATH", file=sys.stderr)
        return 2
    serve(arguments[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
