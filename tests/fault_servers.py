"""Servers of a test's own, to kill, flush, stop and start again (never the shared ones).

A Redis or MariaDB server started here listens on a port of its own and keeps its data
in a directory of its own; ``TRAINYARD_TEST_PORTS`` (``first-last``) confines the ports
to a range, ``TRAINYARD_TEST_DIR_PREFIX`` names the directories (``/tmp/<prefix>*``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.polling import wait_until
from tests.servers import free_port

_HANDED_OUT: set[int] = set()


def own_port() -> int:
    """A free port, from ``TRAINYARD_TEST_PORTS`` when it names a range; never one this
    process was given before (a server may not have bound it yet)."""
    ports = os.environ.get("TRAINYARD_TEST_PORTS", "")
    if not ports:
        return free_port()
    first, last = (int(part) for part in ports.split("-"))
    for port in range(first, last + 1):
        if port in _HANDED_OUT:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {ports}")


def own_directory(kind: str) -> Path:
    prefix = os.environ.get("TRAINYARD_TEST_DIR_PREFIX", "trainyard-test-")
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{kind}-"))


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class RedisServer:
    """redis-server without persistence: killed and started again, it comes back empty."""

    def __init__(self) -> None:
        self.port = own_port()
        self.directory = own_directory("redis")
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        wait_until(lambda: _answers(self.port), 20, f"redis-server on {self.port}")

    def kill(self) -> None:
        """kill -9: everything it held is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def restart_empty(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


class MariaDBServer:
    """mariadbd on a data directory of its own, root without a password over TCP."""

    def __init__(self) -> None:
        self.port = own_port()
        self.directory = own_directory("mariadb")
        self.data = self.directory / "data"
        self.process: subprocess.Popen | None = None
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={self.data}", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        self.start()

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.directory}/mysqld.sock",
             "--user=root", "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
             f"--log-error={self.directory}/error.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        wait_until(lambda: _answers(self.port), 60, f"mariadbd on {self.port}")

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), as an operator or a failover would do it."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)
        deadline = time.monotonic() + 10
        while _answers(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def sql(self, statement: str) -> None:
        subprocess.run(
            ["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{self.port}", "-uroot", "-e",
             statement],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=30)
        shutil.rmtree(self.directory, ignore_errors=True)
