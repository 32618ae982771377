"""The few rtnetlink requests a job's namespace needs, made from the backend's own process.

Each run of ``ip`` is a process started for every job (about 3 ms of CPU on this kind of
host, most of it the program's own start-up); what it does for the job's side of the
namespace (the address, the interfaces up, the default route) is three small netlink
requests, and removing a namespace is an unmount and an unlink. So these are made here:
a netlink socket opened inside the namespace (by a short thread that enters it with
``setns``, so that no other thread of the process ever leaves the host's namespace) takes
the requests, each acknowledged by the kernel or refused with an errno.

Only the standard library is used (``ctypes`` for ``setns`` and ``umount2``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
MNT_DETACH = 2

NLMSG_ERROR = 2
RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE = 16, 20, 24
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_GATEWAY = 5
RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 3, 0, 1
IFF_UP = 0x1
LOOPBACK_INDEX = 1  # a namespace's loopback is always its first interface

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port
_LINK = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_ADDRESS = struct.Struct("=BBBBI")  # ifaddrmsg: family, prefix, flags, scope, index
_ROUTE = struct.Struct("=BBBBBBBBI")  # rtmsg
_ATTRIBUTE = struct.Struct("=HH")  # rtattr: length, type

_libc = ctypes.CDLL(None, use_errno=True)


class NetlinkError(OSError):
    """The kernel refused a request (or a namespace could not be entered)."""


def configure_job_side(netns_path: str, address: str, prefix: int, gateway: str | None) -> None:
    """In the namespace at ``netns_path``: ``address``/``prefix`` on ``eth0``, ``eth0`` and
    the loopback up, and a default route via ``gateway`` where one is given. Raises
    NetlinkError naming the step the kernel refused."""
    route, index = _socket_in(netns_path, "eth0")
    with route:
        requests = [
            ("address", RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, _address(index, address, prefix)),
            ("eth0 up", RTM_NEWLINK, 0, _up(index)),
            ("lo up", RTM_NEWLINK, 0, _up(LOOPBACK_INDEX)),
        ]
        if gateway is not None:
            requests.append(("route", RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, _route(gateway)))
        _send_all(route, requests)


def remove_netns(netns_path: str) -> None:
    """What ``ip netns delete`` does: detach the namespace's mount and remove its file (the
    kernel frees the namespace, its veth pair with it, once nothing holds it). Gone already
    is fine."""
    if _libc.umount2(netns_path.encode(), MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not mounted (a partial one)
            raise NetlinkError(code, f"umount {netns_path}: {os.strerror(code)}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(netns_path)


def in_namespace(netns_path: str, work: Callable[[], T]) -> T:
    """``work()`` done in a thread of its own that has entered the network namespace at
    ``netns_path`` (the sockets it makes are that namespace's), the thread ending with it,
    so that no other thread of the process ever leaves the host's namespace; raises what
    ``work`` raised, or NetlinkError (an OSError) when the namespace cannot be entered."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            namespace = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(namespace, CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise NetlinkError(code, f"cannot enter {netns_path}: {os.strerror(code)}")
            finally:
                os.close(namespace)
            outcome.append(work())
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    thread = threading.Thread(target=run, name="job-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def _socket_in(netns_path: str, interface: str) -> tuple[socket.socket, int]:
    """A route netlink socket of the namespace at ``netns_path`` and the index there of
    ``interface``."""

    def open_route() -> tuple[socket.socket, int]:
        route = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
        try:
            return route, socket.if_nametoindex(interface)
        except OSError:
            route.close()
            raise

    return in_namespace(netns_path, open_route)


def _up(index: int) -> bytes:
    return _LINK.pack(socket.AF_UNSPEC, 0, index, IFF_UP, IFF_UP)


def _address(index: int, address: str, prefix: int) -> bytes:
    packed = ipaddress.IPv4Address(address).packed
    return (
        _ADDRESS.pack(socket.AF_INET, prefix, 0, RT_SCOPE_UNIVERSE, index)
        + _attribute(IFA_LOCAL, packed)
        + _attribute(IFA_ADDRESS, packed)
    )


def _route(gateway: str) -> bytes:
    header = _ROUTE.pack(
        socket.AF_INET, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0
    )
    return header + _attribute(RTA_GATEWAY, ipaddress.IPv4Address(gateway).packed)


def _attribute(kind: int, payload: bytes) -> bytes:
    length = _ATTRIBUTE.size + len(payload)
    return _ATTRIBUTE.pack(length, kind) + payload + b"\0" * (-length % 4)


def _send_all(route: socket.socket, requests: list[tuple[str, int, int, bytes]]) -> None:
    """Send the requests in one write, each asking for an acknowledgement; raise for the
    first the kernel refused (it handles them in order)."""
    flags = NLM_F_REQUEST | NLM_F_ACK
    messages = b"".join(
        _HEADER.pack(_HEADER.size + len(body), kind, flags | extra, sequence, 0) + body
        for sequence, (_, kind, extra, body) in enumerate(requests, start=1)
    )
    route.sendall(messages)
    steps = {sequence: name for sequence, (name, _, _, _) in enumerate(requests, start=1)}
    while steps:
        for kind, sequence, payload in _messages(route.recv(65536)):
            if kind != NLMSG_ERROR or sequence not in steps:
                continue
            (code,) = struct.unpack_from("=i", payload)
            name = steps.pop(sequence)
            if code != 0:
                raise NetlinkError(-code, f"{name}: {os.strerror(-code)}")


def _messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _, sequence, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size:
            break
        yield kind, sequence, data[offset + _HEADER.size : offset + length]
        offset += (length + 3) & ~3
