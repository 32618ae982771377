"""Which account of this host holds the other end of a TCP connection (Linux, from /proc).

Every local account can connect to a TCP port of this host, a job run as its owner
included, so "from this host" does not mean "from the portal". The kernel lists each TCP
socket of this network namespace with the uid that opened it in /proc/net/tcp{,6}: a
server finds the connection it accepted (a socket it holds, whose remote end is the
client's address and port) and the client's socket at the other end of it. Behind the
front (backend/core/front.py) the connection is nginx's, not this process's: nginx tells the
client's endpoint and the one it connected to, and the client's socket is the one between
the two.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Endpoint = tuple[Address, int]


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


def _normal(address: Address) -> Address:
    """IPv4-mapped IPv6 addresses (a dual-stack socket's IPv4 peers) as IPv4."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _endpoint(text: str) -> Endpoint:
    """``0100007F:1F90`` (each 32-bit word of the address in the host's byte order)."""
    hex_address, _, hex_port = text.partition(":")
    words = [int(hex_address[index : index + 8], 16) for index in range(0, len(hex_address), 8)]
    packed = struct.pack(f"={len(words)}I", *words)
    return _normal(ipaddress.ip_address(packed)), int(hex_port, 16)


class TcpSocket(NamedTuple):
    """A row of /proc/net/tcp{,6}."""

    local: Endpoint
    remote: Endpoint
    state: str  # the kernel's TCP state in hex: "01" established, "0A" listen
    uid: int
    inode: int


TCP_LISTEN = "0A"


def tcp_sockets(pid: int | None = None) -> Iterator[TcpSocket]:
    """Every TCP socket of this network namespace, or of process ``pid``'s."""
    tables = TABLES if pid is None else (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6")
    for table in tables:
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    yield TcpSocket(
                        _endpoint(fields[1]),
                        _endpoint(fields[2]),
                        fields[3],
                        int(fields[7]),
                        int(fields[9]),
                    )
        except OSError:
            continue


def peer_uid(
    remote_address: str, remote_port: int, served_at: tuple[str, int] | None = None
) -> int | None:
    """The uid of the client socket at the other end of a connection this process accepted
    from ``remote_address:remote_port`` or, given ``served_at``, of the client socket at
    that endpoint connected to ``served_at`` (a connection the front accepted); None when
    this host lists none (the client is on another host or network namespace, or has
    closed)."""
    try:
        client = (_normal(ipaddress.ip_address(remote_address)), remote_port)
        server = served_at and (_normal(ipaddress.ip_address(served_at[0])), served_at[1])
    except ValueError:
        return None
    sockets = list(tcp_sockets())
    if server:
        served = {server}
    else:
        ours = socket_inodes([os.getpid()])
        served = {
            socket.local for socket in sockets if socket.remote == client and socket.inode in ours
        }
    for socket in sockets:
        if socket.local == client and socket.remote in served:
            return socket.uid
    return None
