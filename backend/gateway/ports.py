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

:func:`job_listener` is the one place that decides it. A sandboxed job has a network
namespace of its own (``job_namespace``), where ``127.0.0.1`` is the job's loopback: the
sockets are those the namespace lists (``/proc/<pid>/net/tcp{,6}`` of a process of the
job that is in it), and :func:`connect` opens the connection from inside it, a thread
entering it (``setns``) just for the ``connect``. Inside, rather than at the job's
address on the bridge: a server on the job's ``127.0.0.1`` only (Jupyter's default, most
``ssh -L`` targets) is reachable nowhere else, and nothing of the host (the portal's
ports) listens in a job's namespace.

A job on another machine (a Slurm worker's node) is checked there: ``slurm_relay``, a
step of the job, runs :func:`job_listener` on the node, and the :class:`Listener` it
answers carries the ``route`` that :func:`connect` goes through.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from backend.core.local_peers import TCP_LISTEN, Address, TcpSocket, socket_inodes, tcp_sockets

CONNECT_TIMEOUT_SECONDS = 10.0
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


class Route(Protocol):
    """How a listener on another machine is reached (a relay in the job: Slurm's)."""

    def open(self, listener: Listener, timeout: float) -> socket.socket: ...


@dataclass(frozen=True)
class Listener:
    """A job's own listening socket(s) at ``address``:``port``; ``inodes`` tell this
    listener from a later one on the same address and port; ``netns`` is the path of the
    job's network namespace the address is in ("" for the host's); ``route`` reaches it
    on another machine (None: on this one)."""

    address: str
    port: int
    inodes: frozenset[int]
    netns: str = ""
    route: Route | None = None

    @property
    def elsewhere(self) -> bool:
        """Whether connections to it are made otherwise than on the host's network."""
        return bool(self.netns) or self.route is not None

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
    job_id: str, host: str, port: int, pids: Iterable[int], owner_uid: int, netns: str = ""
) -> Listener:
    """The address that ``host`` names (``localhost``, ``127.0.0.1``, ``::1``) where
    every socket listening on ``port`` is one the job's processes ``pids`` hold, owned by
    ``owner_uid``: in the job's network namespace at the path ``netns`` when it has one,
    else in the host's; raises NotTheJobs saying why there is none."""
    destinations = LOOPBACK_NAMES.get(host)
    if destinations is None:
        raise NotTheJobs(f"only ports of job {job_id} on localhost can be forwarded")
    pids = list(pids)
    sockets = tcp_sockets(_process_in(netns, pids, job_id)) if netns else tcp_sockets()
    listening = [s for s in sockets if s.state == TCP_LISTEN and s.local[1] == port]
    held = socket_inodes(pids) if listening else set()
    refusal = ""
    for destination in destinations:
        reached = [s for s in listening if reaches(s.local[0], destination)]
        if not reached:
            continue
        if all(_is_jobs(s, held, owner_uid) for s in reached):
            inodes = frozenset(s.inode for s in reached)
            return Listener(str(destination), port, inodes, netns)
        refusal = refusal or (
            f"port {port} at {destination} is not job {job_id}'s: a process that is not "
            "the job's listens there"
        )
    raise NotTheJobs(refusal or f"no process of job {job_id} listens on port {port}")


def _is_jobs(socket: TcpSocket, held: set[int], owner_uid: int) -> bool:
    return socket.inode in held and socket.uid == owner_uid


def _process_in(netns: str, pids: list[int], job_id: str) -> int:
    """A process of ``pids`` in the network namespace at ``netns``, whose /proc lists the
    namespace's sockets; raises NotTheJobs when none is."""
    with contextlib.suppress(OSError):
        namespace = os.stat(netns)
        for pid in pids:
            with contextlib.suppress(OSError):
                joined = os.stat(f"/proc/{pid}/ns/net")
                if (joined.st_dev, joined.st_ino) == (namespace.st_dev, namespace.st_ino):
                    return pid
    raise NotTheJobs(f"no process of job {job_id} runs in its network namespace")


def connect(listener: Listener, timeout: float = CONNECT_TIMEOUT_SECONDS) -> socket.socket:
    """A blocking TCP connection to the listener, made in its job's network namespace when
    it is in one, through its route when it has one; raises OSError when it cannot be
    made."""
    if listener.route is not None:
        return listener.route.open(listener, timeout)
    address = (listener.address, listener.port)
    if not listener.netns:
        return socket.create_connection(address, timeout=timeout)
    # Imported here, not above: ``slurm_relay`` loads this module on a Slurm node with the
    # standard library only (no jobmanager package there), and never enters a namespace.
    from jobmanager.backends.netlink import in_namespace

    return in_namespace(listener.netns, lambda: socket.create_connection(address, timeout))
