"""Enforcement points of users' allowed networks, behind one small interface.

Each point is told the complete list of grants in force (user, network) and brings itself
to exactly that: it reads what it holds, adds what is missing and removes what is not
granted any more, so that applying the same list twice changes nothing the second time.
Nothing here touches the database: :mod:`backend.accounts.allowlist` reads the grants
and drives the points.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from jobmanager.backends.k8s_manifests import (
    LABEL_MANAGED_BY,
    LABEL_USER,
    MANAGED_BY,
    dns_label,
    label_value,
)

if TYPE_CHECKING:  # the client loads only where a Kubernetes point is configured
    from kubernetes import client


@dataclass(frozen=True, order=True)
class Grant:
    username: str
    network: str  # normalised CIDR, e.g. 203.0.113.7/32


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


class EnforcementPoint(Protocol):
    name: str

    def apply(self, grants: Sequence[Grant]) -> Changes:
        """Hold exactly ``grants``; return what had to change."""


def collapsed(networks: Iterable[str], version: int) -> list[str]:
    """The networks of one IP version, overlaps and neighbours merged (an interval set
    refuses overlapping elements), as sorted CIDR strings."""
    parsed = [ipaddress.ip_network(network) for network in networks]
    merged: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]
    if version == 4:
        merged = ipaddress.collapse_addresses(
            n for n in parsed if isinstance(n, ipaddress.IPv4Network)
        )
    else:
        merged = ipaddress.collapse_addresses(
            n for n in parsed if isinstance(n, ipaddress.IPv6Network) and n.version == version
        )
    return sorted(str(network) for network in merged)


# --- nftables -----------------------------------------------------------------------------

Runner = Callable[[Sequence[str]], str]


def run_command(argv: Sequence[str]) -> str:
    completed = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {completed.stderr.strip()}")
    return completed.stdout


class NftablesSet:
    """Two interval sets (IPv4 and IPv6) in an nftables table on the hosts of the job
    endpoints; the host's ruleset accepts SSH from ``@allowed_v4`` / ``@allowed_v6``
    (docs/operations.md). Driven through the ``nft`` command."""

    name = "nftables"
    SETS = {4: ("allowed_v4", "ipv4_addr"), 6: ("allowed_v6", "ipv6_addr")}

    def __init__(
        self, command: str = "nft", table: str = "trainyard", runner: Runner = run_command
    ) -> None:
        self.nft = shlex.split(command)
        self.table = table
        self.run = runner

    def apply(self, grants: Sequence[Grant]) -> Changes:
        self.run([*self.nft, "add", "table", "inet", self.table])  # no-op when it exists
        changes = Changes()
        for version, (set_name, set_type) in self.SETS.items():
            self.run([*self.nft, "add", "set", "inet", self.table, set_name,
                      f"{{ type {set_type} ; flags interval ; }}"])  # fmt: skip
            held = set(self.elements(set_name))
            wanted = set(collapsed((grant.network for grant in grants), version))
            extra, missing = sorted(held - wanted), sorted(wanted - held)
            if extra:
                self._elements("delete", set_name, extra)
            if missing:
                self._elements("add", set_name, missing)
            changes.added += missing
            changes.removed += extra
        return changes

    def elements(self, set_name: str) -> list[str]:
        """The set's elements as CIDR strings, from ``nft -j list set``."""
        output = self.run([*self.nft, "-j", "list", "set", "inet", self.table, set_name])
        found = []
        for item in json.loads(output).get("nftables", []):
            for element in item.get("set", {}).get("elem", []):
                if isinstance(element, dict) and "elem" in element:
                    element = element["elem"]["val"]  # an element with options (timeouts)
                if isinstance(element, str):
                    found.append(str(ipaddress.ip_network(element)))
                elif "prefix" in element:
                    prefix = element["prefix"]
                    found.append(str(ipaddress.ip_network(f"{prefix['addr']}/{prefix['len']}")))
                elif "range" in element:  # added by hand: never granted, so it is removed
                    low, high = element["range"]
                    found.append(f"{low}-{high}")
        return found

    def _elements(self, verb: str, set_name: str, networks: list[str]) -> None:
        self.run([*self.nft, verb, "element", "inet", self.table, set_name,
                  "{ " + ", ".join(networks) + " }"])  # fmt: skip


# --- Kubernetes -------------------------------------------------------------------------

LABEL_PURPOSE = "trainyard.io/purpose"
PURPOSE = "allowed-ips"
ANNOTATION_USER = "trainyard.io/username"


def ip_block_policy(username: str, networks: Sequence[str], namespace: str, port: int) -> dict:
    """A NetworkPolicy that lets the user's networks reach the SSH port of the user's job
    pods (policies add up: the VC's own policy still admits the VC's pods)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": dns_label(f"ty-allow-{username}"),
            "namespace": namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_PURPOSE: PURPOSE,
                LABEL_USER: label_value(username),
            },
            "annotations": {ANNOTATION_USER: username},
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_USER: label_value(username)}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"ipBlock": {"cidr": network}} for network in sorted(networks)],
                    "ports": [{"protocol": "TCP", "port": port}],
                }
            ],
        },
    }


def _metadata(policy: client.V1NetworkPolicy) -> client.V1ObjectMeta:
    """The metadata of a policy read from the API server, which always sends it."""
    if policy.metadata is None:
        raise ValueError("The API server sent a NetworkPolicy without metadata.")
    return policy.metadata


class KubernetesIpBlocks:
    """One NetworkPolicy per user with allowed networks, as an ``ipBlock`` list in front of
    the SSH port of their job pods; a user without networks has no policy."""

    name = "kubernetes"

    def __init__(self, api_client: client.ApiClient, namespace: str, ssh_port: int = 22) -> None:
        from kubernetes.client import NetworkingV1Api

        self.api_client = api_client
        self.networking = NetworkingV1Api(api_client)
        self.namespace = namespace
        self.ssh_port = ssh_port

    def apply(self, grants: Sequence[Grant]) -> Changes:
        from kubernetes.client.exceptions import ApiException

        by_user: dict[str, list[str]] = defaultdict(list)
        for grant in grants:
            by_user[grant.username].append(grant.network)
        wanted = {
            manifest["metadata"]["name"]: manifest
            for manifest in (
                ip_block_policy(user, networks, self.namespace, self.ssh_port)
                for user, networks in by_user.items()
            )
        }
        held = {
            _metadata(policy).name or "": policy
            for policy in self.networking.list_namespaced_network_policy(
                self.namespace, label_selector=f"{LABEL_PURPOSE}={PURPOSE}"
            ).items
        }
        changes = Changes()
        for name, manifest in sorted(wanted.items()):
            user = manifest["metadata"]["annotations"][ANNOTATION_USER]
            current = held.get(name)
            if current is None:
                # The client serialises a manifest dict as it does a model; its hints name
                # only the model.
                self.networking.create_namespaced_network_policy(self.namespace, manifest)  # type: ignore[arg-type]
                changes.added += [f"{user} {network}" for network in by_user[user]]
                continue
            spec = self.api_client.sanitize_for_serialization(current.spec)
            if spec != manifest["spec"]:
                before = _networks(spec)
                manifest["metadata"]["resourceVersion"] = _metadata(current).resource_version
                self.networking.replace_namespaced_network_policy(name, self.namespace, manifest)  # type: ignore[arg-type]
                after = set(by_user[user])
                changes.added += [f"{user} {network}" for network in sorted(after - before)]
                changes.removed += [f"{user} {network}" for network in sorted(before - after)]
        for name in sorted(held.keys() - wanted.keys()):
            policy = held[name]
            user = (_metadata(policy).annotations or {}).get(ANNOTATION_USER, name)
            spec = self.api_client.sanitize_for_serialization(policy.spec)
            try:
                self.networking.delete_namespaced_network_policy(name, self.namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
            changes.removed += [f"{user} {network}" for network in sorted(_networks(spec))]
        return changes


def _networks(spec: dict) -> set[str]:
    return {
        peer["ipBlock"]["cidr"]
        for rule in spec.get("ingress") or []
        for peer in rule.get("from") or []
        if "ipBlock" in peer
    }


# --- cloud security groups --------------------------------------------------------------


class SecurityGroup(Protocol):
    """What a cloud's security group offers: its ingress CIDRs on the SSH port."""

    def ingress_cidrs(self) -> set[str]: ...

    def authorize(self, cidrs: Sequence[str]) -> None: ...

    def revoke(self, cidrs: Sequence[str]) -> None: ...


class MemorySecurityGroup:
    """A security group kept in memory: the reference implementation of the interface
    (and what tests use); a cloud's adapter implements the same three methods."""

    def __init__(self) -> None:
        self.cidrs: set[str] = set()
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def ingress_cidrs(self) -> set[str]:
        return set(self.cidrs)

    def authorize(self, cidrs: Sequence[str]) -> None:
        self.calls.append(("authorize", tuple(cidrs)))
        self.cidrs |= set(cidrs)

    def revoke(self, cidrs: Sequence[str]) -> None:
        self.calls.append(("revoke", tuple(cidrs)))
        self.cidrs -= set(cidrs)


class CloudSecurityGroup:
    """The union of everyone's networks as ingress rules of one security group."""

    name = "cloud"

    def __init__(self, group: SecurityGroup) -> None:
        self.group = group

    def apply(self, grants: Sequence[Grant]) -> Changes:
        wanted = {network for version in (4, 6) for network in
                  collapsed((grant.network for grant in grants), version)}  # fmt: skip
        held = self.group.ingress_cidrs()
        changes = Changes(added=sorted(wanted - held), removed=sorted(held - wanted))
        if changes.removed:
            self.group.revoke(changes.removed)
        if changes.added:
            self.group.authorize(changes.added)
        return changes
