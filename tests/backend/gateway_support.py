"""The SSH gateway for tests: a real ``python -m backend.gateway`` on the test database and
the local backend's state, driven by Debian's OpenSSH client with keys made here."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from backend.accounts.actions import add_ssh_key
from tests.polling import wait_until
from tests.servers import ROOT, free_port, kill_process_group, session_database_url
from tests.unix_accounts import TEST_ACCOUNT_ENV

# The client as a user runs it (log level INFO: banners shown), knowing the gateway's
# host key from its .pub file, as a user who checked the fingerprint would.
SSH_OPTIONS = [
    "-o", "StrictHostKeyChecking=yes",
    "-o", "IdentitiesOnly=yes",
    "-o", "BatchMode=yes",
    "-F", "/dev/null",
]  # fmt: skip


@dataclass
class Gateway:
    process: subprocess.Popen
    port: int
    log: Path
    var_dir: Path

    @property
    def known_hosts(self) -> Path:
        return self.var_dir / "known_hosts"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def running_gateway(
    directory: Path, nodes: str, var_dir: Path | None = None, **env: str
) -> Iterator[Gateway]:
    """The gateway on a free port, over the local backend whose state and logs lie in
    ``directory`` (as tests/backend/jobs/test_local_backend_e2e.py lays them out), with its
    var/ (its host key) in ``var_dir`` (a new one by default)."""
    port = free_port()
    var_dir = var_dir or directory / f"gateway-{port}"
    var_dir.mkdir(exist_ok=True)
    log = directory / f"gateway-{port}.log"
    environment = (
        os.environ
        | TEST_ACCOUNT_ENV
        | {
            "DATABASE_URL": session_database_url(),
            "TRAINYARD_SECRET_KEY": settings.SECRET_KEY,  # the portal's: its sessions, tokens
            "TRAINYARD_VAR_DIR": str(var_dir),
            "TRAINYARD_BACKEND": "local",
            "TRAINYARD_LOCAL_STATE_DIR": str(directory / "local-backend"),
            "TRAINYARD_LOG_DIR": str(directory / "logs"),
            "TRAINYARD_LOCAL_NODES": nodes,
            "TRAINYARD_LOCAL_CGROUP_ROOT": "",
            "TRAINYARD_SSH_LISTEN": "127.0.0.1",
            "TRAINYARD_SSH_PORT": str(port),
            "TRAINYARD_SSH_JOB_CHECK_SECONDS": "0.2",
            # Its endpoint proxy on a port of its own, not the default another may hold.
            "TRAINYARD_ENDPOINTS_PORT": str(free_port()),
        }
        | env
    )
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "backend.gateway"],
            cwd=ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    gateway = Gateway(process, port, log, var_dir)
    try:
        wait_until(
            lambda: listening(port) or process.poll() is not None, 30, "the gateway to listen"
        )
        assert process.poll() is None, gateway.output()
        public_key = (var_dir / "ssh_host_ed25519_key.pub").read_text().split()
        gateway.known_hosts.write_text(f"[127.0.0.1]:{port} {public_key[0]} {public_key[1]}\n")
        yield gateway
    finally:
        kill_process_group(process)


def make_key(directory: Path, name: str) -> Path:
    """An ed25519 key pair (``name``, ``name.pub``) made with ssh-keygen."""
    path = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return path


def registered_key(directory: Path, user) -> Path:
    key = make_key(directory, f"id_{user.username}")
    add_ssh_key(user, Path(f"{key}.pub").read_text(), name="laptop")
    return key


def ssh_argv(
    gateway: Gateway, key: Path, login: str, *arguments: str, program: str = "ssh"
) -> list[str]:
    """``program`` (ssh) with the key and the gateway's port and host key; options in
    ``arguments`` before the command (ssh takes them after the destination too)."""
    port = ["-P" if program in ("scp", "sftp") else "-p", str(gateway.port)]
    return [program, "-i", str(key), *port, *SSH_OPTIONS,
            "-o", f"UserKnownHostsFile={gateway.known_hosts}",
            *([f"{login}@127.0.0.1"] if program == "ssh" else []), *arguments]  # fmt: skip


def ssh(gateway: Gateway, key: Path, login: str, *arguments: str, **kwargs):
    kwargs.setdefault("timeout", 60)
    return subprocess.run(
        ssh_argv(gateway, key, login, *arguments), capture_output=True, text=True, **kwargs
    )


def ssh_started(gateway: Gateway, key: Path, login: str, *arguments: str) -> subprocess.Popen:
    """``ssh`` started, not waited for: its output and errors on pipes, as text."""
    return subprocess.Popen(
        ssh_argv(gateway, key, login, *arguments),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def on_terminal(argv: list[str], timeout: float = 60) -> tuple[int, str]:
    """``argv`` (``ssh -tt ...``) run on a terminal of its own, a pty of 0x0 as
    ``script``'s is, with nothing typed on it; its exit status and what the terminal showed
    (``\r`` dropped).

    Not ``script``: at the end of its own input (``/dev/null`` under xdist) it types ^D,
    which the still-cooked terminal keeps as a NUL (the end-of-file mark) that ssh reads
    once it has made the terminal raw and sends to the session as typed input, where the
    remote terminal echoes it as ``^@``. The terminal's input here stays open and empty
    until the program ends."""
    master, slave = os.openpty()
    try:
        process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
    finally:
        os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([master], [], [], left)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every process on the terminal has closed it
                break
            if not chunk:
                break
            shown += chunk
        else:
            raise subprocess.TimeoutExpired(argv, timeout, bytes(shown))
        code = process.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return code, shown.decode(errors="replace").replace("\r", "")


@contextmanager
def tunnel_to(gateway: Gateway, key: Path, login: str, destination: str) -> Iterator[int]:
    """``ssh -N -L`` from a free port of the host's 127.0.0.1 to ``destination``
    (``host:port``) through the gateway; yields the local port, the client ended after."""
    local_port = free_port()
    tunnel = subprocess.Popen(
        ssh_argv(gateway, key, login, "-N", "-o", "ExitOnForwardFailure=yes",
                 "-L", f"127.0.0.1:{local_port}:{destination}"),
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield local_port
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)
