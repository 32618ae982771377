"""Whether an (address, port) of this host is a job's own, from /proc (Linux).

``ssh -L``/``-W`` through the gateway and the endpoint proxy, both run as root, connect
to a job's server over this host's loopback. They connect only to an address whose
listening socket is the job's: of the TCP sockets in /proc/net/tcp{,6} listening on that
port, every one that a connection to that address could reach (one bound to the address
itself, or to the wildcard of its family, or ``::``, which may take IPv4 too) must be held
open by a process of the job (its inode among the processes' file descriptors) and
belong to the job's owner (its uid). Anything else on the host (the portal's web,
health and metrics ports, Redis, the database, the gateway, another tenant's server)
is refused, also when a process of the job listens on the same port number elsewhere
(``::1`` while the portal holds 127.0.0.1).

:func:`job_listener` is the one place that decides it; when a job gets a network
namespace of its own, it becomes "connect inside the job's namespace".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from backend.core.local_peers import TCP_LISTEN, Address, TcpSocket, socket_inodes, tcp_sockets

IPV4_ANY = ipaddress.ip_address("0.0.0.0")
IPV6_ANY = ipaddress.ip_address("::")
IPV4_LOOPBACK = ipaddress.ip_address("127.0.0.1")
IPV6_LOOPBACK = ipaddress.ip_address("::1")
# The names a client may forward to, and the addresses each stands for, in the order
# tried: "localhost" is whichever of the two the job's server listens on.
LOOPBACK_NAMES: dict[str, tuple[Address, ...]] = {
    "localhost": (IPV4_LOOPBACK, IPV6_LOOPBACK),
    "127.0.0.1": (IPV4_LOOPBACK,),
    "::1": (IPV6_LOOPBACK,),
    "ip6-localhost": (IPV6_LOOPBACK,),
}


class NotTheJobs(Exception):
    """The (address, port) is not the job's own; the message says why, to the user."""


@dataclass(frozen=True)
class Listener:
    """A job's own listening socket(s) at ``address``:``port``; ``inodes`` tell this
    listener from a later one on the same address and port."""

    address: str
    port: int
    inodes: frozenset[int]

    @property
    def host_port(self) -> str:
        """``127.0.0.1:8888`` or ``[::1]:8888``, as a URL's authority."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


def reaches(bound: Address, destination: Address) -> bool:
    """Whether a socket listening on ``bound`` may accept a connection to
    ``destination``. ``::`` counts for IPv4 too: /proc does not tell whether it is
    IPV6_V6ONLY."""
    if bound in (destination, IPV6_ANY):
        return True
    return bound == IPV4_ANY and destination.version == 4


def job_listener(
    job_id: str, host: str, port: int, pids: Iterable[int], owner_uid: int
) -> Listener:
    """The address that ``host`` names (``localhost``, ``127.0.0.1``, ``::1``) where
    every socket listening on ``port`` is one the job's processes ``pids`` hold, owned by
    ``owner_uid``; raises NotTheJobs saying why there is none."""
    destinations = LOOPBACK_NAMES.get(host)
    if destinations is None:
        raise NotTheJobs(f"only ports of job {job_id} on localhost can be forwarded")
    listening = [s for s in tcp_sockets() if s.state == TCP_LISTEN and s.local[1] == port]
    pids = list(pids)
    held = socket_inodes(pids) if listening else set()
    refusal = ""
    for destination in destinations:
        reached = [s for s in listening if reaches(s.local[0], destination)]
        if not reached:
            continue
        if all(_is_jobs(s, held, owner_uid) for s in reached):
            return Listener(str(destination), port, frozenset(s.inode for s in reached))
        refusal = refusal or (
            f"port {port} at {destination} is not job {job_id}'s: a process that is not "
            "the job's listens there"
        )
    raise NotTheJobs(refusal or f"no process of job {job_id} listens on port {port}")


def _is_jobs(socket: TcpSocket, held: set[int], owner_uid: int) -> bool:
    return socket.inode in held and socket.uid == owner_uid
