"""The allowlist manager: allowed networks reach every enforcement point (the SSH gateway,
an nftables set - the real nft in a network namespace of its own where this machine
allows one, and a stand-in otherwise -, Kubernetes NetworkPolicies on the fake API
server, a security group), an expired one disappears from all of them on the next
reconcile, and a reconcile with nothing new changes nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.utils import timezone

from backend.accounts import actions
from backend.accounts.allowlist import SshGateway, reconcile
from backend.accounts.enforcement import (
    CloudSecurityGroup,
    KubernetesIpBlocks,
    MemorySecurityGroup,
    NftablesSet,
)
from backend.accounts.models import AllowedIp, AllowedIpEvent

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fake"]

NAMESPACE = "trainyard-jobs"
STAND_IN = Path(__file__).parents[1] / "bin" / "nft"


def _namespace_possible() -> bool:
    if not (shutil.which("nft") and shutil.which("unshare") and shutil.which("nsenter")):
        return False
    probe = subprocess.run(["unshare", "-n", "nft", "list", "ruleset"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture(params=["real", "stand-in"])
def nft_command(request, tmp_path: Path, monkeypatch) -> Iterator[str]:
    """A command line that runs nft against a firewall of the test's own."""
    if request.param == "stand-in":
        monkeypatch.setenv("NFT_STANDIN_LOG", str(tmp_path / "nft.log"))
        monkeypatch.setenv("NFT_STANDIN_STATE", str(tmp_path / "nft.json"))
        yield str(STAND_IN)
        return
    if not _namespace_possible():
        pytest.skip("no network namespace for the real nft here (needs CAP_SYS_ADMIN)")
    # A process in a fresh network namespace holds it; nft runs inside it via nsenter.
    holder = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", "echo ready; exec cat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Only once it says so is the holder in its new namespace: before, nft would
        # reach this machine's own firewall.
        assert holder.stdout.readline() == "ready\n"
        namespace = f"/proc/{holder.pid}/ns/net"
        assert os.readlink(namespace) != os.readlink("/proc/self/ns/net")
        yield f"nsenter --net={namespace} nft"
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)


@pytest.fixture
def points(nft_command, fake_api_client):
    return [
        SshGateway(),
        NftablesSet(nft_command),
        KubernetesIpBlocks(fake_api_client, NAMESPACE),
        CloudSecurityGroup(MemorySecurityGroup()),
    ]


def nft_elements(nft_command: str) -> set[str]:
    return set(NftablesSet(nft_command).elements("allowed_v4")) | set(
        NftablesSet(nft_command).elements("allowed_v6")
    )


def policies(fake) -> dict[str, set[str]]:
    """Each user's networks in the fake cluster's allowlist policies."""
    found = {}
    for policy in fake.list("networkpolicies", NAMESPACE, "trainyard.io/purpose=allowed-ips"):
        kubernetes_validate.validate(policy, kubernetes_validate.latest_version(), strict=True)
        user = policy["metadata"]["annotations"]["trainyard.io/username"]
        rule = policy["spec"]["ingress"][0]
        assert rule["ports"] == [{"protocol": "TCP", "port": 22}]
        assert policy["spec"]["podSelector"] == {"matchLabels": {"trainyard.io/user": user}}
        found[user] = {peer["ipBlock"]["cidr"] for peer in rule["from"]}
    return found


def test_an_expired_ip_disappears_from_every_point_on_the_next_reconcile(
    world, points, nft_command, fake_kubernetes
):
    member, outsider = world.member, world.outsider
    actions.add_allowed_ip(member, "203.0.113.7")
    actions.add_allowed_ip(member, "198.51.100.0/24")
    actions.add_allowed_ip(outsider, "2001:db8::/64")
    soon = actions.add_allowed_ip(
        outsider, "192.0.2.10", expires_at=timezone.now() + timedelta(hours=1)
    )

    reconcile(points)

    everything = {"203.0.113.7/32", "198.51.100.0/24", "2001:db8::/64", "192.0.2.10/32"}
    assert nft_elements(nft_command) == everything
    assert policies(fake_kubernetes) == {
        member.username: {"203.0.113.7/32", "198.51.100.0/24"},
        outsider.username: {"2001:db8::/64", "192.0.2.10/32"},
    }
    assert points[3].group.ingress_cidrs() == everything
    assert SshGateway.allows(outsider.username, "192.0.2.10")
    assert not SshGateway.allows(member.username, "192.0.2.10")  # not the member's

    later = soon.expires_at + timedelta(seconds=1)
    result = reconcile(points, now=later)

    assert result.expired == 1 and not result.failed
    assert "192.0.2.10/32" not in nft_elements(nft_command)
    assert policies(fake_kubernetes)[outsider.username] == {"2001:db8::/64"}
    assert "192.0.2.10/32" not in points[3].group.ingress_cidrs()
    assert not SshGateway.allows(outsider.username, "192.0.2.10")
    assert not AllowedIp.objects.filter(network="192.0.2.10/32").exists()
    assert list(AllowedIpEvent.objects.filter(user=outsider).values_list("network", "kind")) == [
        ("192.0.2.10/32", "expired"),
        ("192.0.2.10/32", "added"),
        ("2001:db8::/64", "added"),
    ]


def test_a_reconcile_with_nothing_new_changes_nothing(world, points, fake_kubernetes):
    actions.add_allowed_ip(world.member, "203.0.113.7")
    actions.add_allowed_ip(world.member, "203.0.113.0/28")  # overlaps: merged in the sets
    reconcile(points)
    writes = len(fake_kubernetes.requests) - len(fake_kubernetes.requests_for("GET"))

    again = reconcile(points)

    assert not any(again.changes.values()) and not again.failed
    assert len(fake_kubernetes.requests) - len(fake_kubernetes.requests_for("GET")) == writes


def test_a_removed_ip_leaves_every_point_and_the_last_one_takes_the_policy(
    world, points, nft_command, fake_kubernetes
):
    allowed = actions.add_allowed_ip(world.member, "203.0.113.7")
    reconcile(points)

    response = world.client(world.member).delete(f"/api/v1/me/allowed-ips/{allowed.pk}/")
    result = reconcile(points)

    assert response.status_code == 204
    assert result.changes["nftables"].removed == ["203.0.113.7/32"]
    assert nft_elements(nft_command) == set()
    assert policies(fake_kubernetes) == {}
    events = world.client(world.member).get("/api/v1/me/allowed-ip-events/").json()["results"]
    assert [(event["network"], event["kind"]) for event in events] == [
        ("203.0.113.7/32", "removed"),
        ("203.0.113.7/32", "added"),
    ]
    assert world.client(world.outsider).get("/api/v1/me/allowed-ip-events/").json()["count"] == 0


def test_one_failing_point_does_not_keep_the_others_stale(world, fake_api_client, tmp_path):
    actions.add_allowed_ip(world.member, "203.0.113.7")
    group = MemorySecurityGroup()
    broken = NftablesSet(str(tmp_path / "no-such-nft"))

    result = reconcile([broken, CloudSecurityGroup(group)])

    assert "nftables" in result.failed
    assert group.ingress_cidrs() == {"203.0.113.7/32"}


def test_the_stand_in_refuses_what_nft_refuses(tmp_path, monkeypatch):
    monkeypatch.setenv("NFT_STANDIN_LOG", str(tmp_path / "nft.log"))
    monkeypatch.setenv("NFT_STANDIN_STATE", str(tmp_path / "nft.json"))
    nft = NftablesSet(str(STAND_IN))
    nft.apply([])

    with pytest.raises(RuntimeError, match="overlaps"):
        nft._elements("add", "allowed_v4", ["10.0.0.0/24", "10.0.0.5/32"])
    with pytest.raises(RuntimeError, match="does not exist"):
        nft._elements("delete", "allowed_v4", ["10.9.9.9/32"])
    logged = [json.loads(line) for line in (tmp_path / "nft.log").read_text().splitlines()]
    assert logged[0] == ["add", "table", "inet", "trainyard"]


def test_what_was_put_in_the_firewall_by_hand_is_removed(world, nft_command):
    if "nsenter" not in nft_command:
        pytest.skip("ranges need the real nft")
    actions.add_allowed_ip(world.member, "203.0.113.7")
    nft = NftablesSet(nft_command)
    nft.apply([])
    nft._elements("add", "allowed_v4", ["10.0.0.3-10.0.0.9", "192.0.2.0/24"])

    result = reconcile([nft])

    assert result.changes["nftables"].removed == ["10.0.0.3-10.0.0.9", "192.0.2.0/24"]
    assert nft_elements(nft_command) == {"203.0.113.7/32"}


def test_the_kubernetes_point_needs_only_what_its_role_grants(world, fake_kubernetes):
    manifests = Path(__file__).parents[3] / "deploy" / "kubernetes" / "trainyard.yaml"
    [role] = [
        document
        for document in yaml.safe_load_all(manifests.read_text())
        if document and document["kind"] == "Role"
        and document["metadata"]["name"] == "trainyard-allowlist"
    ]  # fmt: skip
    granted = {verb for rule in role["rules"] for verb in rule["verbs"]}
    point = KubernetesIpBlocks(fake_kubernetes.api_client(), role["metadata"]["namespace"])
    allowed = actions.add_allowed_ip(world.member, "203.0.113.7")
    reconcile([point])
    second = actions.add_allowed_ip(world.member, "198.51.100.0/24")
    reconcile([point])  # replaces the policy
    actions.remove_allowed_ip(allowed)
    actions.remove_allowed_ip(second)
    reconcile([point])  # deletes it

    verbs = {"GET": "list", "POST": "create", "PUT": "update", "DELETE": "delete"}
    used = {verbs[request.method] for request in fake_kubernetes.requests}
    assert used == granted
