"""What a network plugin that enforces NetworkPolicy (Calico, Cilium) lets through, for
pod-to-pod ingress, as the Kubernetes documentation states it: a pod selected by an
ingress policy of its namespace admits a peer only when a rule of one of those policies
admits it (policies add up); a pod no such policy selects admits everyone. ``ipBlock``
peers are about addresses outside the cluster, and never admit a pod here.
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


def _peer_admits(peer: dict[str, Any], policy_namespace: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source.namespace_labels_with_name()):
            return False
    elif source.namespace != policy_namespace:  # a podSelector alone: the policy's namespace
        return False
    return selects(peer.get("podSelector"), source.labels)


def _ingress_policies(policies: list[dict[str, Any]], target: Pod) -> list[dict[str, Any]]:
    chosen = []
    for policy in policies:
        spec = policy["spec"]
        types = spec.get("policyTypes") or ["Ingress"]
        if (
            policy["metadata"]["namespace"] == target.namespace
            and "Ingress" in types
            and selects(spec.get("podSelector"), target.labels)
        ):
            chosen.append(policy)
    return chosen


def admits(policies: list[dict[str, Any]], source: Pod, target: Pod) -> bool:
    """Whether ``source`` may open a connection to ``target`` (some port) under
    ``policies``, every NetworkPolicy of the cluster."""
    isolating = _ingress_policies(policies, target)
    if not isolating:
        return True
    for policy in isolating:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            if not peers:  # a rule without peers admits every source
                return True
            if any(_peer_admits(peer, target.namespace, source) for peer in peers):
                return True
    return False
