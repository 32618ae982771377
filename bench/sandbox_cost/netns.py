"""The CPU a sandboxed job's network namespace costs, as the local backend makes it.

    .venv/bin/python -m bench.sandbox_cost.netns [--jobs 100]

As root. On a bridge and a /24 of its own (removed at the end), ``--jobs`` times what a
deployment and its removal do to the network: a namespace planned (a spare taken when there
is one), made, the spares kept (``keep_spares`` of the backend's default size), then
removed; the spares left are removed at the end. It prints the CPU time of this process
(its threads) and of every ``ip`` it ran, a namespace, and the wall time. The kernel's
clean-up of a removed namespace runs in its own threads and is not counted (nor is it in
``bench.sandbox_cost``).
"""

from __future__ import annotations

import argparse
import resource
import secrets
import time

from jobmanager.backends.sandbox_net import DEFAULT_SPARES, BridgeNetwork


def cpu_seconds() -> float:
    """CPU of this process and of the children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    third = 200 + secrets.randbelow(50)
    network = BridgeNetwork(f"tynet{secrets.token_hex(3)}", f"10.88.{third}.0/24", True)
    try:
        start, started = cpu_seconds(), time.monotonic()
        for _ in range(args.jobs):
            job_network = network.plan()
            network.create(job_network)
            network.keep_spares(DEFAULT_SPARES)
            network.remove(job_network)
        with network._topping_up:  # the last top-up done
            pass
        network.remove_spares()
        cpu, wall = cpu_seconds() - start, time.monotonic() - started
    finally:
        network.tear_down()
    print(f"{args.jobs} namespaces: {cpu / args.jobs * 1e3:.2f} ms CPU a namespace (this")
    print(f"process and its ip), {wall / args.jobs * 1e3:.1f} ms wall a namespace")


if __name__ == "__main__":
    main()
