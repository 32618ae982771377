"""Each job's NetworkPolicy: its pods admit only the same job's pods and the SSH gateway's
(as deploy/kubernetes labels them), two members of one VC being two tenants; created with
the job, deleted with it, kept up to date, and swept by ``reports()``. What the policies
admit is evaluated as a network plugin would (tests/k8s_fake/netpol.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes import client

from jobmanager.backends.k8s_manifests import (
    KubernetesSettings,
    job_policy_manifest,
    job_policy_name,
)
from jobmanager.backends.kubernetes import KubernetesBackend
from tests.jobmanager.test_kubernetes_backend import KUBERNETES_VERSION, a_launch
from tests.k8s_fake.netpol import Pod, admits, selects

pytest_plugins = ["tests.k8s_fake"]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
ALICE_JOB, BOB_JOB = "alicejob01", "bobjob0001"


def deployed_pod(path: str, kind: str, name: str) -> Pod:
    """A pod of a Deployment in deploy/kubernetes, with the labels its template gives."""
    for document in yaml.safe_load_all((DEPLOY / path).read_text()):
        if document and (document["kind"], document["metadata"]["name"]) == (kind, name):
            labels = document["spec"]["template"]["metadata"]["labels"]
            return Pod(document["metadata"]["namespace"], labels)
    raise AssertionError(f"no {kind} {name} in {path}")


def deployed_policies() -> list[dict]:
    return [
        document
        for path in sorted(DEPLOY.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document and document["kind"] == "NetworkPolicy"
    ]


GATEWAY = deployed_pod("ssh-gateway.yaml", "Deployment", "trainyard-ssh-gateway")
WEB = deployed_pod("trainyard.yaml", "Deployment", "trainyard-web")


@pytest.fixture
def fake(k8s_cluster):
    return k8s_cluster.require_fake()


@pytest.fixture
def backend(k8s_cluster, fake_clock):
    backend = KubernetesBackend(
        k8s_cluster.settings, api_client=k8s_cluster.api_client, watch_nodes=False, clock=fake_clock
    )
    yield backend
    backend.node_watcher.stop()


def pods_of(fake, namespace: str, job_id: str) -> list[Pod]:
    return [
        Pod(namespace, pod["metadata"]["labels"])
        for pod in fake.list("pods", namespace, f"trainyard.io/job={job_id}")
    ]


def test_a_job_s_pods_admit_the_same_job_s_pods_and_the_gateway_not_another_member_s_job(
    k8s_cluster, fake, backend
):
    namespace = k8s_cluster.namespace
    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB, vc="vision", owner="alice"))
    backend.deploy(a_launch(k8s_cluster, job_id=BOB_JOB, vc="vision", owner="bob"))
    policies = fake.list("networkpolicies") + deployed_policies()
    alice, bob = pods_of(fake, namespace, ALICE_JOB), pods_of(fake, namespace, BOB_JOB)
    assert len(alice) == len(bob) == 2 and alice[0].labels["trainyard.io/vc"] == "vision"

    for own, other in ((alice, bob), (bob, alice)):
        for target in own:
            assert all(admits(policies, peer, target) for peer in own)
            assert admits(policies, GATEWAY, target)
            assert not any(admits(policies, peer, target) for peer in other)
            assert not admits(policies, WEB, target)  # the portal's other pods
            # The gateway's labels count in the portal's namespace only.
            assert not admits(policies, Pod(namespace, GATEWAY.labels), target)
            assert not admits(policies, Pod("tenant-sandbox", GATEWAY.labels), target)


def test_the_policy_is_made_before_any_pod_kept_across_attempts_and_deleted_on_remove(
    k8s_cluster, fake, backend
):
    name = job_policy_name(ALICE_JOB)
    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB))

    created = [request.body["kind"] for request in fake.requests_for("POST")]
    assert created.index("NetworkPolicy") < created.index("Pod")
    policy = fake.get("networkpolicies", name, k8s_cluster.namespace)
    assert policy["metadata"]["annotations"]["trainyard.io/job-id"] == ALICE_JOB
    kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)

    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB))  # the same attempt again
    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB, attempt=2))
    assert len(fake.requests_for("POST", "networkpolicies")) == 1
    assert fake.requests_for("PUT", "networkpolicies") == []

    backend.remove(ALICE_JOB)
    assert fake.get("networkpolicies", name, k8s_cluster.namespace) is None
    backend.remove(ALICE_JOB)  # removing twice is fine


def test_a_policy_that_admits_more_is_replaced_on_deploy(k8s_cluster, fake, backend):
    networking = client.NetworkingV1Api(k8s_cluster.api_client)
    everyone = {"podSelector": {}, "ingress": [{}]}
    wide = {"metadata": {"name": job_policy_name(ALICE_JOB)}, "spec": everyone}
    networking.create_namespaced_network_policy(k8s_cluster.namespace, wide)

    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB))

    stored = fake.get("networkpolicies", job_policy_name(ALICE_JOB), k8s_cluster.namespace)
    assert stored["spec"] == job_policy_manifest(ALICE_JOB, k8s_cluster.settings)["spec"]
    assert len(fake.requests_for("PUT", "networkpolicies")) == 1


def test_with_egress_closed_a_job_reaches_its_own_pods_and_the_dns_only(k8s_cluster, fake):
    settings = replace(k8s_cluster.settings, egress_open=False)
    backend = KubernetesBackend(settings, api_client=k8s_cluster.api_client, watch_nodes=False)
    namespace = settings.namespace
    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB, owner="alice"))
    backend.deploy(a_launch(k8s_cluster, job_id=BOB_JOB, owner="bob"))
    policies = fake.list("networkpolicies") + deployed_policies()
    alice, bob = pods_of(fake, namespace, ALICE_JOB), pods_of(fake, namespace, BOB_JOB)
    dns = Pod("kube-system", {"k8s-app": "kube-dns"})
    elsewhere = Pod("storage", {"app": "minio"})

    assert admits(policies, alice[0], alice[1]) and admits(policies, alice[0], dns)
    assert not admits(policies, alice[0], elsewhere) and not admits(policies, alice[0], WEB)
    assert not admits(policies, alice[0], Pod("kube-system", {"k8s-app": "metrics-server"}))
    assert admits(policies, GATEWAY, alice[0])  # replies to the gateway need no egress rule
    assert not admits(policies, alice[0], bob[0])
    [policy] = fake.list("networkpolicies", namespace, f"trainyard.io/job={ALICE_JOB}")
    assert not any("ipBlock" in peer for rule in policy["spec"]["egress"] for peer in rule["to"])
    kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)
    # Open (the default), the same job reaches what is outside the jobs' namespace.
    open_policies = [job_policy_manifest(ALICE_JOB, k8s_cluster.settings), *deployed_policies()]
    assert admits(open_policies, alice[0], elsewhere) and admits(open_policies, alice[0], WEB)


def test_reports_bring_a_running_job_s_policy_to_the_settings_now(k8s_cluster, fake):
    backend = KubernetesBackend(
        k8s_cluster.settings, api_client=k8s_cluster.api_client, watch_nodes=False
    )
    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB))
    closed = replace(k8s_cluster.settings, egress_open=False)
    restarted = KubernetesBackend(closed, api_client=k8s_cluster.api_client, watch_nodes=False)

    restarted.reports()
    restarted.reports()  # and once it is, it is left alone

    stored = fake.get("networkpolicies", job_policy_name(ALICE_JOB), k8s_cluster.namespace)
    assert stored["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert len(fake.requests_for("PUT", "networkpolicies")) == 1


def test_reports_give_older_jobs_a_policy_and_sweep_vc_policies_and_leftovers(
    k8s_cluster, fake, backend, fake_clock
):
    namespace = k8s_cluster.namespace
    networking = client.NetworkingV1Api(k8s_cluster.api_client)
    managed = {"app.kubernetes.io/managed-by": "trainyard"}
    vision = {"trainyard.io/vc": "vision"}
    # What an earlier version left: a VC-wide policy, and a job deployed without its own.
    networking.create_namespaced_network_policy(
        namespace,
        {
            "metadata": {"name": "ty-vc-vision", "labels": managed | vision},
            "spec": {
                "podSelector": {"matchLabels": vision},
                "ingress": [{"from": [{"podSelector": {"matchLabels": vision}}]}],
            },
        },
    )
    allowlist = {"name": "ty-allow-alice", "labels": managed | {"trainyard.io/user": "alice"}}
    networking.create_namespaced_network_policy(
        namespace, {"metadata": allowlist, "spec": {"podSelector": {}}}
    )
    backend.deploy(a_launch(k8s_cluster, job_id=ALICE_JOB, owner="alice"))
    backend.deploy(a_launch(k8s_cluster, job_id=BOB_JOB, owner="bob"))
    networking.delete_namespaced_network_policy(job_policy_name(ALICE_JOB), namespace)
    networking.create_namespaced_network_policy(
        namespace, job_policy_manifest("gone000001", backend.settings)
    )

    backend.reports()

    names = {policy["metadata"]["name"] for policy in fake.list("networkpolicies", namespace)}
    assert names == {job_policy_name(j) for j in (ALICE_JOB, BOB_JOB, "gone000001")} | {
        "ty-allow-alice"
    }
    policies = fake.list("networkpolicies")
    alice, bob = pods_of(fake, namespace, ALICE_JOB), pods_of(fake, namespace, BOB_JOB)
    assert not admits(policies, bob[0], alice[0]) and admits(policies, alice[1], alice[0])

    fake_clock.now += 2 * backend.settings.start_timeout_seconds  # a deploy long since over
    backend.reports()
    names = {policy["metadata"]["name"] for policy in fake.list("networkpolicies", namespace)}
    assert names == {job_policy_name(ALICE_JOB), job_policy_name(BOB_JOB), "ty-allow-alice"}


def test_the_deployed_default_deny_keeps_the_gateway_s_way_in():
    """The jobs' namespace of deploy/ denies ingress to any pod no policy admits to; a
    job's policy with the default settings still admits the gateway as deploy/ runs it."""
    settings = KubernetesSettings()
    policies = [job_policy_manifest(ALICE_JOB, settings), *deployed_policies()]
    job_pod = Pod(settings.namespace, {"trainyard.io/job": ALICE_JOB})
    stray = Pod(settings.namespace, {"app": "debug"})

    assert admits(policies, GATEWAY, job_pod) and not admits(policies, WEB, job_pod)
    assert not admits(policies, job_pod, stray) and not admits(policies, GATEWAY, stray)
    for policy in policies:
        kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)


def _in(*values: str) -> dict:
    return {"key": "a", "operator": "In", "values": list(values)}


def _not_in(*values: str) -> dict:
    return {"key": "a", "operator": "NotIn", "values": list(values)}


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [_in("1", "2")]}, {"a": "2"}, True),
        ({"matchExpressions": [_in("1", "2")]}, {}, False),
        ({"matchExpressions": [_not_in("1")]}, {}, True),
        ({"matchExpressions": [_not_in("1")]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
        ({"matchLabels": {"b": "1"}, "matchExpressions": [_in("1")]}, {"b": "1"}, False),
    ],
)
def test_the_evaluator_reads_label_selectors_as_kubernetes_does(selector, labels, selected):
    assert selects(selector, labels) is selected


def test_the_evaluator_reads_peers_as_kubernetes_does():
    target = Pod("jobs", {"job": "a"})
    same_ns = Pod("jobs", {"job": "b"})
    portal = Pod("portal", {"role": "gw"}, {"team": "ops"})
    policy = {
        "metadata": {"namespace": "jobs"},
        "spec": {"podSelector": {"matchLabels": {"job": "a"}}},
    }

    def only(*peers):
        return [policy | {"spec": policy["spec"] | {"ingress": [{"from": list(peers)}]}}]

    assert admits([], same_ns, target)  # no policy: open
    assert not admits([policy], same_ns, target)  # selected, no rule: closed
    assert admits(only({"podSelector": {}}), same_ns, target)
    assert not admits(only({"podSelector": {}}), portal, target)  # own namespace only
    assert admits(only({"namespaceSelector": {"matchLabels": {"team": "ops"}}}), portal, target)
    both = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "gw"}}}
    assert admits(only(both), portal, target) and not admits(only(both), same_ns, target)
    assert not admits(only({"ipBlock": {"cidr": "0.0.0.0/0"}}), same_ns, target)
    egress_only = policy | {"spec": policy["spec"] | {"policyTypes": ["Egress"]}}
    assert admits([egress_only], same_ns, target)
