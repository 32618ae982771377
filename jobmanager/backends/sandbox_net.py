"""The network of sandboxed jobs: a network namespace per job, with an address on a host
bridge.

Every worker of a job joins its job's namespace (made with ``ip netns add``): the workers
reach each other at the job's address (or on the namespace's own loopback), and the host
reaches the job's address through the bridge. The bridge's ports are isolated from each
other (``bridge link set ... isolated on``), and an nftables table of the bridge's own
drops what jobs send to the host itself (its loopback services are out of reach anyway:
a job's ``127.0.0.1`` is its namespace's) and, routed, to other jobs. Egress NAT (on by
default) masquerades what jobs send elsewhere, for ``pip install`` and data; off, a job
has no default route and reaches nothing beyond the host's bridge.

Addresses are claimed one file each (``O_EXCL``) in ``/run/trainyard/addresses/<bridge>``,
holding the namespace's name, so that two deployments at once never take the same one, even
of two backends (two state directories) on one bridge; the host holds the subnet's first
address. The claims live in ``/run`` as the namespaces do: a reboot clears both.

Making a namespace takes a run of ``ip`` (the host's side: the namespace, its veth pair on
the bridge) and three netlink requests made from this process inside it (the job's side:
``netlink.py``; removing one is an unmount, no ``ip`` either). A few are made ahead, off
the deployments' path (``make_spares``: one ``ip`` for the host's side of all of them),
each recorded by a file in ``/run/trainyard/spares/<bridge>`` once it is complete, topped
up once half are taken. A deployment takes one by removing its file (two never take the
same one) and makes one itself when none is left. A spare was never used: a job's
namespace is never handed to another job, it is removed with the job.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import ipaddress
import os
import secrets
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from jobmanager.backends import netlink

DEFAULT_BRIDGE = "trainyard0"
DEFAULT_SUBNET = "10.88.0.0/16"
NETNS_DIR = Path("/run/netns")
CLAIMS_DIR = Path("/run/trainyard/addresses")
SPARES_DIR = Path("/run/trainyard/spares")
DEFAULT_SPARES = 8  # one for each deployment thread of a pass; a burst makes its own
COMMAND_TIMEOUT_SECONDS = 30.0


class NetworkError(RuntimeError):
    """The host refused a step of the job's network; the message says which and why."""


@dataclass(frozen=True, slots=True)
class JobNetwork:
    """One job's namespace and address, as the state records them."""

    netns: str
    address: str
    made: bool = False  # a spare: made, up and on the bridge already (not recorded)

    @property
    def path(self) -> str:
        return str(NETNS_DIR / self.netns)


class BridgeNetwork:
    """The jobs' bridge on this host, its firewall, and each job's namespace on it."""

    def __init__(self, bridge: str, subnet: str, egress_nat: bool) -> None:
        """Raises ValueError for a bridge name or subnet that cannot be used."""
        if not 1 <= len(bridge) <= 15 or not bridge.replace("-", "").isalnum():
            raise ValueError(f"{bridge!r} is not a network interface name (15 characters).")
        self.bridge = bridge
        self.subnet = ipaddress.ip_network(subnet)
        if self.subnet.version != 4 or self.subnet.num_addresses < 4:
            raise ValueError(f"{subnet!r}: give an IPv4 subnet with room for jobs.")
        self.gateway = next(self.subnet.hosts())
        self.egress_nat = egress_nat
        self.claims = CLAIMS_DIR / bridge
        self.spares = SPARES_DIR / bridge
        self.table = f"trainyard_{bridge.replace('-', '_')}"
        self._ready = False
        self._topping_up = threading.Lock()
        self._made_spares = False

    def describe(self) -> str:
        egress = "egress NAT" if self.egress_nat else "no egress"
        return f"job netns on bridge {self.bridge} ({self.subnet}), {egress}"

    def plan(self) -> JobNetwork:
        """The job's namespace and address: a spare's, taken for good, or a name and an
        address claimed for it (nothing made yet: the backend records them first, so that
        an undo finds what ``create`` makes)."""
        spare = self._take_spare()
        if spare is not None:
            return spare
        netns = _new_netns_name()
        return JobNetwork(netns, str(self._claim(netns)))

    def create(self, network: JobNetwork) -> None:
        """The job's namespace, up, with its address on the bridge (a spare is already);
        raises NetworkError (having removed what it made) where the host refuses a step."""
        if network.made:
            return
        self._set_up_bridge()
        try:  # two commands, not eight: each start of ip is paid by every job's start
            _run(["ip", "-batch", "-"], self._host_side(network))
            self._make_job_side(network)
        except NetworkError:
            self.remove(network)
            raise

    def _host_side(self, network: JobNetwork) -> str:
        """``ip -batch`` lines: the namespace and its veth pair, the host's end on the
        bridge, isolated from the other ports (no job to job on the bridge)."""
        netns, outside = network.netns, f"tyv{_digest(network.netns)[:12]}"
        return (
            f"netns add {netns}\n"
            f"link add {outside} type veth peer name eth0 netns {netns}\n"
            f"link set {outside} master {self.bridge} up\n"
            f"link set {outside} type bridge_slave isolated on\n"
        )

    def _make_job_side(self, network: JobNetwork) -> None:
        """In the namespace: the address, the interfaces up, the route out (egress on)."""
        gateway = str(self.gateway) if self.egress_nat else None
        try:  # netlink from this process: no ip started for it (netlink.py says why)
            netlink.configure_job_side(
                network.path, network.address, self.subnet.prefixlen, gateway
            )
        except OSError as error:
            raise NetworkError(f"namespace {network.netns}: {error}") from error

    def make_spares(self, count: int) -> int:
        """``count`` spare namespaces, complete, for deployments to take (the host's side of
        all of them in one ``ip``); how many were made. Raises NetworkError (having removed
        what it made) where the host refuses the host's side."""
        if count <= 0:
            return 0
        self._set_up_bridge()
        self.spares.mkdir(mode=0o700, parents=True, exist_ok=True)
        netnses = [_new_netns_name() for _ in range(count)]
        networks = [JobNetwork(netns, str(self._claim(netns))) for netns in netnses]
        try:
            _run(["ip", "-batch", "-"], "".join(map(self._host_side, networks)))
        except NetworkError:
            for network in networks:
                self.remove(network)
            raise
        made = 0
        for network in networks:
            try:
                self._make_job_side(network)
            except NetworkError:
                self.remove(network)
                continue
            # Listed once complete (a name starting with "." is not listed yet).
            partial = self.spares / f".{network.netns}"
            partial.write_text(network.address)
            partial.rename(self.spares / network.netns)
            made += 1
        return made

    def keep_spares(self, size: int) -> None:
        """Top the spares up to ``size`` in a thread of this process's (one at a time; none
        when one is at it), off the caller's path, once half of them or more are taken:
        several made by one ``ip``, not one by each deployment. Those left when the process
        ends are removed then."""
        if size <= 0 or self.spare_count() > size // 2:
            return
        if not self._topping_up.acquire(blocking=False):
            return
        if not self._made_spares:
            self._made_spares = True
            atexit.register(self.remove_spares)
        threading.Thread(target=self._top_up, args=(size,), daemon=True).start()

    def _top_up(self, size: int) -> None:
        try:
            self.make_spares(size - self.spare_count())
        except NetworkError:
            pass  # deployments make their own meanwhile, and say why if they cannot
        finally:
            self._topping_up.release()

    def spare_count(self) -> int:
        """How many spare namespaces are there to take."""
        try:
            return sum(not entry.name.startswith(".") for entry in os.scandir(self.spares))
        except FileNotFoundError:
            return 0

    def _take_spare(self) -> JobNetwork | None:
        """A spare namespace, taken for good (its file removed: whoever removes it has it);
        None when none is left."""
        try:
            entries = [entry for entry in os.scandir(self.spares) if entry.name[0] != "."]
        except FileNotFoundError:
            return None
        for entry in entries:
            try:
                address = Path(entry.path).read_text()
                os.unlink(entry.path)
            except FileNotFoundError:
                continue  # taken by another deployment meanwhile
            network = JobNetwork(entry.name, address, made=True)
            if (NETNS_DIR / entry.name).exists():
                return network
            self.remove(network)  # gone with a cleared /run: forget its claim
        return None

    def remove_spares(self) -> None:
        """Every spare namespace not taken (at a backend's end; nothing ran in them)."""
        while (spare := self._take_spare()) is not None:
            self.remove(spare)

    def remove(self, network: JobNetwork) -> None:
        """The namespace (its veth pair with it) and the address's claim; gone already is
        fine."""
        self.remove_all([network])

    def remove_all(self, networks: list[JobNetwork]) -> None:
        """The namespaces and their addresses' claims."""
        for network in networks:  # as ip netns delete, without starting ip
            with contextlib.suppress(OSError):
                netlink.remove_netns(network.path)
            with contextlib.suppress(FileNotFoundError):
                (self.claims / network.address).unlink()

    def tear_down(self) -> None:
        """The bridge, its firewall and every job's namespace still claimed on it, by any
        backend (for tests and hosts that stop using them)."""
        with self._topping_up:  # this process's top-up, if one is under way, done first
            self.remove_spares()
            for claim in self.claims.glob("*") if self.claims.is_dir() else []:
                self.remove(JobNetwork(claim.read_text(), claim.name))
        with contextlib.suppress(OSError):
            self.spares.rmdir()
        with contextlib.suppress(NetworkError):
            _run(["nft", "delete", "table", "inet", self.table])
        with contextlib.suppress(NetworkError):
            _run(["nft", "delete", "table", "ip", f"{self.table}_nat"])
        with contextlib.suppress(NetworkError):
            _ip("link", "delete", self.bridge)
        with contextlib.suppress(OSError):
            self.claims.rmdir()
        self._ready = False

    def _set_up_bridge(self) -> None:
        """The bridge with the host's address and the firewall, made once (idempotent)."""
        if self._ready:
            return
        if not Path(f"/sys/class/net/{self.bridge}").exists():
            with contextlib.suppress(NetworkError):  # another backend may be making it
                _ip("link", "add", self.bridge, "type", "bridge")
        gateway = f"{self.gateway}/{self.subnet.prefixlen}"
        with contextlib.suppress(NetworkError):  # already there
            _ip("addr", "add", gateway, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        _run(["nft", "-f", "-"], self._ruleset())
        if self.egress_nat:
            Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
        self._ready = True

    def _ruleset(self) -> str:
        bridge, table = self.bridge, self.table
        onward = "accept" if self.egress_nat else "drop"
        rules = f"""
table inet {table}
delete table inet {table}
table inet {table} {{
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname "{bridge}" ct state established,related accept
    iifname "{bridge}" drop
  }}
  chain forward {{
    type filter hook forward priority 0; policy accept;
    iifname "{bridge}" oifname "{bridge}" drop
    oifname "{bridge}" ct state established,related accept
    oifname "{bridge}" drop
    iifname "{bridge}" {onward}
  }}
}}
"""
        if self.egress_nat:
            rules += f"""
table ip {table}_nat
delete table ip {table}_nat
table ip {table}_nat {{
  chain postrouting {{
    type nat hook postrouting priority 100; policy accept;
    ip saddr {self.subnet} oifname != "{bridge}" masquerade
  }}
}}
"""
        return rules

    def _claim(self, netns: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        """A free address of the subnet, claimed for the namespace ``netns``; tried from one
        its name picks, so that concurrent deployments rarely contend."""
        self.claims.mkdir(mode=0o700, parents=True, exist_ok=True)
        hosts = self.subnet.num_addresses - 3  # the network, the gateway, the broadcast
        start = int(_digest(netns), 16) % hosts
        first = int(self.subnet.network_address) + 2
        for step in range(hosts):
            address = ipaddress.ip_address(first + (start + step) % hosts)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            try:
                descriptor = os.open(self.claims / str(address), flags, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(descriptor, "w") as claim:
                claim.write(netns)
            return address
        raise NetworkError(f"no address of {self.subnet} is free")


def _new_netns_name() -> str:
    """A name no namespace has had (not the job's: an attempt's namespace may still be
    being removed as the next attempt's is made)."""
    return f"ty-{secrets.token_hex(5)}"


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:10]


def _ip(*arguments: str) -> None:
    _run(["ip", *arguments])


def _run(argv: list[str], stdin: str | None = None) -> None:
    try:
        subprocess.run(
            argv, input=stdin, capture_output=True, text=True, check=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )  # fmt: skip
    except subprocess.CalledProcessError as error:
        said = (error.stderr or error.stdout or "").strip()
        raise NetworkError(f"{' '.join(argv)}: {said or f'exit {error.returncode}'}") from error
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetworkError(f"{' '.join(argv)}: {error}") from error
