"""``job_listener`` on real sockets of this process: which (address, port) it calls a job's
own, and what it says otherwise (the tenant attacks themselves are in
test_gateway_hijacks.py)."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator

import pytest

from backend.gateway.ports import NotTheJobs, job_listener, reaches

JOB = "k3m9x2q7ab"


@pytest.fixture
def listening() -> Iterator:
    """Listen on an address, at a port (0: any free one), as this process."""
    opened: list[socket.socket] = []

    def listen(address: str, port: int = 0) -> int:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        server = socket.socket(family)
        opened.append(server)
        server.bind((address, port))
        server.listen()
        return server.getsockname()[1]

    yield listen
    for server in opened:
        server.close()


def test_a_port_the_process_listens_on_is_its_own(listening):
    port = listening("127.0.0.1")

    listener = job_listener(JOB, "localhost", port, [os.getpid()], os.getuid())

    assert (listener.address, listener.port, listener.host_port) == (
        "127.0.0.1", port, f"127.0.0.1:{port}"
    )  # fmt: skip


def test_localhost_is_1_when_the_job_listens_there_alone(listening):
    port = listening("::1")

    listener = job_listener(JOB, "localhost", port, [os.getpid()], os.getuid())

    assert listener.host_port == f"[::1]:{port}"
    # (Or some other process of the host's listens at 127.0.0.1 on that port by chance.)
    nothing_there = f"no process of job {JOB} listens on port {port}|is not job {JOB}'s"
    with pytest.raises(NotTheJobs, match=nothing_there):
        job_listener(JOB, "127.0.0.1", port, [os.getpid()], os.getuid())


def test_a_socket_of_another_account_or_process_is_not_the_job_s(listening):
    port = listening("127.0.0.1")
    refusal = f"port {port} at 127.0.0.1 is not job {JOB}'s: a process that is not the job's"

    with pytest.raises(NotTheJobs, match=refusal):
        job_listener(JOB, "127.0.0.1", port, [os.getpid()], os.getuid() + 1)
    with pytest.raises(NotTheJobs, match=refusal):
        job_listener(JOB, "127.0.0.1", port, [], os.getuid())


def test_only_loopback_names_are_forwarded():
    with pytest.raises(NotTheJobs, match=f"only ports of job {JOB} on localhost"):
        job_listener(JOB, "10.0.0.1", 22, [os.getpid()], os.getuid())


@pytest.mark.parametrize(
    ("bound", "destination", "reached"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("::", "127.0.0.1", True),  # unless IPV6_V6ONLY, which /proc does not tell
        ("::", "::1", True),
        ("::1", "127.0.0.1", False),
        ("127.0.0.1", "::1", False),
        ("0.0.0.0", "::1", False),
        ("127.0.0.2", "127.0.0.1", False),
    ],
)
def test_which_listening_sockets_a_connection_may_reach(bound, destination, reached):
    assert reaches(ipaddress.ip_address(bound), ipaddress.ip_address(destination)) is reached
