"""``python3 slurm_relay.py <job id> <host> <port> [<inodes>] [--check]``: a TCP
connection to a port of this Slurm job on this node, relayed over stdin and stdout.

Run by the gateway as a step of the job (``srun --jobid --overlap``, as the job's owner,
on the worker's node: the node's loopback is the job's). It connects only where
``ports.job_listener`` finds the job's own listener: every socket listening on that port
that a connection to the address could reach is held by a process of this job (one
descending from a ``slurmstepd`` of this Slurm job, a root process the tenant cannot
fake) and owned by the job's owner (this process's uid). Its first line on stdout says
``ok <address> <inode,...>`` or ``refused <why>``; after ``ok``, the bytes of the
connection follow, both ways. With ``<inodes>`` it connects only while those very
sockets listen there; ``--check`` answers and connects nowhere.

Standard library only: it runs in the job under the node's own ``python3``, and loads the
gateway's ``ports`` without the backend package (Django, Celery).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
import types
from pathlib import Path

STEPD = re.compile(r"^slurmstepd: \[(\d+)\.")
CHUNK = 64 * 1024


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, uid) of the process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        return parent, os.stat(f"/proc/{pid}").st_uid
    except (OSError, ValueError, IndexError):
        return None


def _stepd_job(pid: int) -> int | None:
    """The Slurm job whose step ``pid`` is the (root's) slurmstepd of, else None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            title = cmdline.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return None
    match = STEPD.match(title)
    return int(match[1]) if match else None


def job_of(pid: int, parents: dict[int, tuple[int, int]]) -> int | None:
    """The Slurm job of the first root slurmstepd above ``pid``, None when none is."""
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        parent, uid = parents.get(pid, (0, -1))
        if uid == 0 and (job := _stepd_job(pid)) is not None:
            return job
        pid = parent
    return None


def job_pids(slurm_id: int) -> list[int]:
    """This node's processes of the Slurm job (its steps' slurmstepd's descendants)."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (found := _stat(int(name))) is not None:
            parents[int(name)] = found
    return [
        pid for pid, (_, uid) in parents.items() if uid != 0 and job_of(pid, parents) == slurm_id
    ]


def _load_ports() -> types.ModuleType:
    """backend.gateway.ports, its package's ``__init__`` (Celery) left out."""
    package = types.ModuleType("backend")
    package.__path__ = [str(Path(__file__).resolve().parents[1])]
    sys.modules.setdefault("backend", package)
    from backend.gateway import ports

    return ports


def _pump(source, sink) -> None:
    """Copy until end of file, then pass the end on."""
    try:
        while chunk := source():
            sink(chunk)
    except OSError:
        pass


def relay(connection: socket.socket) -> None:
    """stdin to the connection, the connection to stdout, until both ends have ended."""

    def inbound() -> None:
        _pump(lambda: os.read(0, CHUNK), connection.sendall)
        _shut(connection)

    threading.Thread(target=inbound, daemon=True).start()
    _pump(lambda: connection.recv(CHUNK), _write_out)
    os.close(1)


def _write_out(chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(1, view) :]


def _shut(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_WR)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    args = [arg for arg in argv if arg != "--check"]
    job_id, host, port = args[0], args[1], int(args[2])
    wanted = frozenset(int(i) for i in args[3].split(",")) if len(args) > 3 else None
    ports = _load_ports()
    slurm_id = job_of(os.getpid(), {pid: s for pid in _ancestry() if (s := _stat(pid))})
    if slurm_id is None:
        return _answer("refused this relay does not run in a Slurm job's step", 1)
    try:
        listener = ports.job_listener(job_id, host, port, job_pids(slurm_id), os.getuid())
    except ports.NotTheJobs as refusal:
        return _answer(f"refused {refusal}", 1)
    if wanted is not None and listener.inodes != wanted:
        return _answer(f"refused another server of job {job_id} listens on port {port} now", 1)
    inodes = ",".join(str(inode) for inode in sorted(listener.inodes))
    if check:
        return _answer(f"ok {listener.address} {inodes}", 0)
    try:
        connection = socket.create_connection((listener.address, port), timeout=10)
    except OSError as error:
        return _answer(f"refused cannot connect to port {port}: {error.strerror}", 1)
    connection.settimeout(None)
    _answer(f"ok {listener.address} {inodes}", 0)
    relay(connection)
    return 0


def _ancestry() -> list[int]:
    pids, pid = [], os.getpid()
    while pid > 1 and (found := _stat(pid)) is not None:
        pids.append(pid)
        pid = found[0]
    return pids


def _answer(line: str, code: int) -> int:
    os.write(1, (line.replace("\n", " ") + "\n").encode())
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
