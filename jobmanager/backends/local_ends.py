"""Ends of local-backend workers, noticed as they happen.

Each worker's init (``local_init --notify-socket``) sends one datagram when it has written
its status file: its pid and that file. ``EndListener`` receives them on a Unix socket of
its own (mode 0600: the jobs' accounts cannot reach it), waits for that init to be gone
(a pidfd, no polling; the backend reports a worker ended only once its init is gone) and
then calls back with the job's id. Nothing here is needed for correctness: the job
manager's periodic pass finds every end anyway; this only makes it find them at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)
MAX_MESSAGE = 4096


def job_of(status_file: str) -> str:
    """The job id of a status file ``<state>/<job id>/a<n>-worker-<rank>.status.json``."""
    return Path(status_file).parent.name


class EndListener:
    def __init__(self, socket_path: Path | str) -> None:
        self.socket_path = Path(socket_path)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        previous = os.umask(0o177)
        try:
            self.sock.bind(str(self.socket_path))
        finally:
            os.umask(previous)
        self.socket_path.chmod(0o600)
        self.sock.setblocking(False)

    def serve(self, on_end: Callable[[str], None], stop: threading.Event | None = None) -> None:
        """Call ``on_end(job_id)`` for each worker that ends, until ``stop`` is set."""
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ, None)
        try:
            while stop is None or not stop.is_set():
                for key, _ in selector.select(timeout=0.5):
                    if key.data is None:
                        self._receive(selector, on_end)
                    else:
                        selector.unregister(key.fileobj)
                        os.close(key.fd)
                        _call(on_end, key.data)
        finally:
            for key in list(selector.get_map().values()):
                if key.data is not None:
                    os.close(key.fd)
            selector.close()

    def _receive(self, selector: selectors.BaseSelector, on_end: Callable[[str], None]) -> None:
        while True:
            try:
                message = self.sock.recv(MAX_MESSAGE).decode(errors="replace")
            except BlockingIOError:
                return
            pid_text, _, status_file = message.partition(" ")
            if not pid_text.isdigit() or not status_file:
                continue
            try:
                pidfd = os.pidfd_open(int(pid_text))
            except ProcessLookupError:  # gone already
                _call(on_end, job_of(status_file))
                continue
            except OSError:  # no pidfds here: report it now, the poll is the safety net
                _call(on_end, job_of(status_file))
                continue
            # Readable once the init has exited (the backend no longer sees it alive).
            selector.register(pidfd, selectors.EVENT_READ, job_of(status_file))

    def close(self) -> None:
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()


def _call(on_end: Callable[[str], None], job_id: str) -> None:
    try:
        on_end(job_id)
    except Exception:  # a failing callback must not stop the listener
        logger.exception("Reporting the end of job %s failed", job_id)
