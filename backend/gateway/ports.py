"""Which TCP ports a set of processes listens on, from /proc (Linux).

``ssh -L`` through the gateway reaches only ports that a process of the job listens on:
a socket's inode in /proc/net/tcp{,6}, in state LISTEN, must be one of the file
descriptors of the job's processes. Nothing else on the host (the portal's database or
Redis, another tenant's server) is reachable, whoever listens there.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from backend.core.local_peers import TCP_LISTEN, socket_inodes, tcp_sockets

# A listener the gateway can reach on the loopback interface (::ffff:127.0.0.1 reads as
# 127.0.0.1).
LOCAL_ADDRESSES = {ipaddress.ip_address(text) for text in ("0.0.0.0", "127.0.0.1", "::", "::1")}


def listening_inodes(port: int) -> set[int]:
    """Inodes of the sockets listening on ``port`` on an address reachable at 127.0.0.1
    or ::1."""
    return {
        socket.inode
        for socket in tcp_sockets()
        if socket.state == TCP_LISTEN
        and socket.local[1] == port
        and socket.local[0] in LOCAL_ADDRESSES
    }


def listened_by(port: int, pids: Iterable[int]) -> bool:
    """Whether one of the processes listens on ``port`` (at 127.0.0.1, ::1 or any)."""
    listening = listening_inodes(port)
    return bool(listening) and bool(listening & socket_inodes(pids))
