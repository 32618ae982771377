"""The jobs' bridge of a test run: the local backend sandboxes jobs by default where the
suite runs as root (``TRAINYARD_LOCAL_SANDBOX=auto``), and its jobs' network namespaces sit
on a bridge. Each test process (each pytest-xdist worker) takes a bridge and a /24 of
10.88.0.0/16 of its own, for every backend it makes (``sandbox_net``'s defaults), every
server it starts (the environment) and Django's settings; at its end the bridge, its
firewall, the namespaces left on it and the containers' empty cgroup parents are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from jobmanager.backends import sandbox_net
from jobmanager.backends.sandbox import (
    CGROUPS,
    remove_abandoned_runtime_dirs,
    remove_empty_cgroups,
)
from jobmanager.backends.sandbox_net import BridgeNetwork
from tests.unix_accounts import JOB_PYTHONPATH, REPOSITORY

SANDBOX_SUPERNET = ipaddress.ip_network("10.88.0.0/16")


# Claims of /24s among this host's test processes (xdist workers, parallel runs): a
# subnet is a test's while it holds the flock of its file; a killed process's lock goes
# with it.
SUBNET_CLAIMS = Path("/run/lock/trainyard-test-subnets")


def _subnets_on_host() -> set[ipaddress.IPv4Network]:
    """The /24 of each 10.88.x.y address of this host (other runs' bridges; a bridge on all
    of 10.88.0.0/16, as the default trainyard0 is, takes its own /24: a /24 route beside
    it is the more specific one)."""
    shown = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    return {
        ipaddress.ip_network(f"{ipaddress.ip_interface(word).ip}/24", strict=False)
        for word in shown.split()
        if word.startswith("10.88.") and "/" in word
    }


def _claims_directory() -> Path:
    directory = SUBNET_CLAIMS if os.geteuid() == 0 else Path(f"/tmp/ty-test-subnets-{os.geteuid()}")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


def _claim(net: ipaddress.IPv4Network) -> int | None:
    """The locked descriptor of ``net``'s claim (closing it gives the claim up), or None
    when a live test process holds it."""
    path = _claims_directory() / f"{net.network_address}.lock"
    claim = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(claim)
        return None
    return claim


@contextlib.contextmanager
def claimed_subnet() -> Iterator[str]:
    """A /24 of 10.88.0.0/16 on no bridge of this host and claimed by no other test
    process until the block ends (two bridges on one /24 make the host's route to a job
    ambiguous: "No route to host")."""
    used = _subnets_on_host()
    candidates = [net for net in SANDBOX_SUPERNET.subnets(new_prefix=24) if net not in used][1:]
    secrets.SystemRandom().shuffle(candidates)
    for net in candidates:
        claim = _claim(net)
        if claim is None:
            continue
        try:
            yield str(net)
        finally:
            os.close(claim)  # the lock goes with the descriptor
        return
    raise RuntimeError("every /24 of 10.88.0.0/16 is in use on this host")


def remove_abandoned_test_networks() -> None:
    """The test bridges (``tyt...``) whose /24 no live test process claims, with their
    firewall and the namespaces on them: what a test run killed before its teardown
    left (a test's network is claimed from before its bridge is made until after it is
    removed)."""
    shown = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for line in shown.splitlines():
        words = line.split()
        if len(words) < 4 or not words[1].startswith("tyt"):
            continue
        net = ipaddress.ip_interface(words[3]).network
        if not net.subnet_of(SANDBOX_SUPERNET):
            continue
        claim = _claim(net)
        if claim is None:
            continue
        try:
            BridgeNetwork(words[1], str(net), egress_nat=True).tear_down()
        finally:
            os.close(claim)


def _cgroup_parents() -> set[str]:
    """The containers' cgroup parents, each named after a backend's state directory."""
    return {str(path) for path in CGROUPS.glob("*/trainyard-*")}


@contextlib.contextmanager
def private_sandbox_network() -> Iterator[None]:
    """This process's jobs' bridge and subnet, the default while it lasts; removed at its
    end with what was left on it."""
    bridge = f"tyt{secrets.token_hex(4)}"
    if os.geteuid() == 0:
        remove_abandoned_test_networks()
        remove_abandoned_runtime_dirs()  # those of backends whose state is gone, only
        for parent in _cgroup_parents():  # a killed run's, emptied since
            remove_empty_cgroups(Path(parent))
    parents_before = _cgroup_parents()
    with claimed_subnet() as subnet, pytest.MonkeyPatch.context() as patch:
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
                remove_abandoned_runtime_dirs()  # never another process's live backend's
                for parent in _cgroup_parents() - parents_before:
                    remove_empty_cgroups(Path(parent))  # one still in use stays


def shared_with_jobs(directory: Path) -> list[str]:
    """What a test's sandboxed jobs see read-only beside the system: the test's directory
    (the scripts it writes for them, as a site shares data with jobs through
    TRAINYARD_LOCAL_SANDBOX_PATHS), the repository and the suite's packages (a job's
    PYTHONPATH). Bare processes see them anyway."""
    return [str(directory), str(REPOSITORY), *JOB_PYTHONPATH.split(":")]
