"""The jobs' bridge of a test run: the local backend sandboxes jobs by default where the
suite runs as root (``TRAINYARD_LOCAL_SANDBOX=auto``), and its jobs' network namespaces sit
on a bridge. Each test process (each pytest-xdist worker) takes a bridge and a /24 of
10.88.0.0/16 of its own, for every backend it makes (``sandbox_net``'s defaults), every
server it starts (the environment) and Django's settings; at its end the bridge, its
firewall, the namespaces left on it and the containers' empty cgroup parents are removed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from jobmanager.backends import sandbox_net
from jobmanager.backends.sandbox import CGROUPS
from jobmanager.backends.sandbox_net import BridgeNetwork
from tests.unix_accounts import JOB_PYTHONPATH, REPOSITORY

SANDBOX_SUPERNET = ipaddress.ip_network("10.88.0.0/16")


def unused_subnet() -> str:
    """A /24 of 10.88.0.0/16 that no address of this host is in (other runs' bridges)."""
    shown = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    used = {
        # The /24 of the address, whatever its own prefix (make run's bridge has a /16).
        ipaddress.ip_interface(word.split("/")[0] + "/24").network
        for word in shown.split()
        if word.startswith("10.88.") and "/" in word
    }
    free = [net for net in SANDBOX_SUPERNET.subnets(new_prefix=24) if net not in used][1:]
    return str(secrets.choice(free))


def _cgroup_parents() -> set[str]:
    return {str(path) for path in CGROUPS.glob("*/trainyard-*")}


@contextlib.contextmanager
def private_sandbox_network() -> Iterator[None]:
    """This process's jobs' bridge and subnet, the default while it lasts; removed at its
    end with what was left on it."""
    bridge, subnet = f"tyt{secrets.token_hex(4)}", unused_subnet()
    parents_before = _cgroup_parents()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sandbox_net, "DEFAULT_BRIDGE", bridge)
        patch.setattr(sandbox_net, "DEFAULT_SUBNET", subnet)
        patch.setenv("TRAINYARD_LOCAL_SANDBOX_BRIDGE", bridge)
        patch.setenv("TRAINYARD_LOCAL_SANDBOX_SUBNET", subnet)
        patch.setattr(settings, "TRAINYARD_LOCAL_SANDBOX_BRIDGE", bridge)
        patch.setattr(settings, "TRAINYARD_LOCAL_SANDBOX_SUBNET", subnet)
        try:
            yield
        finally:
            if os.geteuid() == 0:
                BridgeNetwork(bridge, subnet, egress_nat=True).tear_down()
                for parent in _cgroup_parents() - parents_before:
                    with contextlib.suppress(OSError):  # one still in use stays
                        os.rmdir(parent)


def shared_with_jobs(directory: Path) -> list[str]:
    """What a test's sandboxed jobs see read-only beside the system: the test's directory
    (the scripts it writes for them, as a site shares data with jobs through
    TRAINYARD_LOCAL_SANDBOX_PATHS), the repository and the suite's packages (a job's
    PYTHONPATH). Bare processes see them anyway."""
    return [str(directory), str(REPOSITORY), *JOB_PYTHONPATH.split(":")]
