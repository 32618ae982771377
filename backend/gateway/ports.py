"""Which TCP ports a set of processes listens on, from /proc (Linux).

``ssh -L`` through the gateway reaches only ports that a process of the job listens on:
a socket's inode in /proc/net/tcp{,6}, in state LISTEN, must be one of the file
descriptors of the job's processes. Nothing else on the host (the portal's database or
Redis, another tenant's server) is reachable, whoever listens there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

TCP_LISTEN = "0A"
TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
# A listener the gateway can reach on the loopback interface.
LOCAL_ADDRESSES = {
    "00000000",  # 0.0.0.0
    "0100007F",  # 127.0.0.1
    "00000000000000000000000000000000",  # ::
    "00000000000000000000000001000000",  # ::1
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
}


def listening_inodes(port: int) -> set[int]:
    """Inodes of the sockets listening on ``port`` on an address reachable at 127.0.0.1
    or ::1."""
    found = set()
    for table in TABLES:
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    address, _, hex_port = fields[1].partition(":")
                    if fields[3] != TCP_LISTEN or int(hex_port, 16) != port:
                        continue
                    if address.upper() in LOCAL_ADDRESSES:
                        found.add(int(fields[9]))
        except OSError:
            continue
    return found


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """The socket inodes the processes hold open."""
    found = set()
    for pid in pids:
        directory = f"/proc/{pid}/fd"
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{directory}/{name}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(int(target[8:-1]))
    return found


def listened_by(port: int, pids: Iterable[int]) -> bool:
    """Whether one of the processes listens on ``port`` (at 127.0.0.1, ::1 or any)."""
    listening = listening_inodes(port)
    return bool(listening) and bool(listening & socket_inodes(pids))
