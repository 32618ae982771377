"""What a network plugin that enforces NetworkPolicy (Calico, Cilium) lets through, for
connections between pods, as the Kubernetes documentation states it: a pod selected by
an ingress (egress) policy of its namespace admits a peer (reaches a peer) only when a
rule of one of those policies allows it (policies add up); a pod no such policy selects
is open that way. ``ipBlock`` peers are about addresses outside the cluster, and never
match a pod here; ports are not looked at (the question is: some port).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str]
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def namespace_labels_with_name(self) -> dict[str, str]:
        return self.namespace_labels | {
            NAMESPACE_NAME_LABEL: self.namespace
        }  # forced by the server


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector selects ``labels``: matchLabels and matchExpressions (In,
    NotIn, Exists, DoesNotExist) all hold; an empty selector selects everything."""
    selector = selector or {}
    unknown = set(selector) - {"matchLabels", "matchExpressions"}
    assert not unknown, f"not a LabelSelector field: {unknown}"
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_holds(expression, labels) for expression in selector.get("matchExpressions") or [])


def _holds(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values")
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    assert operator == "DoesNotExist", f"not a selector operator: {operator}"
    return key not in labels


def _peer_admits(entry: dict[str, Any], policy_namespace: str, peer: Pod) -> bool:
    """Whether a peer entry (``from``/``to``) of a policy in ``policy_namespace`` matches."""
    if "ipBlock" in entry:
        return False
    if "namespaceSelector" in entry:
        if not selects(entry["namespaceSelector"], peer.namespace_labels_with_name()):
            return False
    elif peer.namespace != policy_namespace:  # a podSelector alone: the policy's namespace
        return False
    return selects(entry.get("podSelector"), peer.labels)


def _types(spec: dict[str, Any]) -> list[str]:
    """policyTypes, or what the API server defaults it to."""
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _side_admits(policies: list[dict[str, Any]], pod: Pod, peer: Pod, direction: str) -> bool:
    """Whether ``pod``'s policies of ``direction`` (Ingress: ``peer`` connects to it;
    Egress: it connects to ``peer``) let the connection through."""
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    isolating = [
        policy
        for policy in policies
        if policy["metadata"]["namespace"] == pod.namespace
        and direction in _types(policy["spec"])
        and selects(policy["spec"].get("podSelector"), pod.labels)
    ]
    if not isolating:
        return True
    for policy in isolating:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            if not peers:  # a rule without peers admits every peer
                return True
            if any(_peer_admits(entry, pod.namespace, peer) for entry in peers):
                return True
    return False


def admits(policies: list[dict[str, Any]], source: Pod, target: Pod) -> bool:
    """Whether ``source`` may open a connection to ``target`` (some port) under
    ``policies``, every NetworkPolicy of the cluster: the source's egress and the
    target's ingress must both let it through."""
    return _side_admits(policies, source, target, "Egress") and _side_admits(
        policies, target, source, "Ingress"
    )
