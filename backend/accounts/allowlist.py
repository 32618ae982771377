"""The allowlist manager: users' allowed networks kept in force at every enforcement point.

The database is the truth. The SSH gateway reads it on every connection (so a change is
in force at once there); the other points (host nftables sets, Kubernetes NetworkPolicy
``ipBlock`` lists, a cloud security group) are brought to it by :func:`reconcile`, which
beat runs every ``TRAINYARD_ALLOWLIST_RECONCILE_SECONDS``: it first expires networks past
their date (each an event), then applies the grants in force to every point. Running it
twice in a row changes nothing the second time.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from backend.accounts import actions
from backend.accounts.enforcement import (
    Changes,
    CloudSecurityGroup,
    EnforcementPoint,
    Grant,
    KubernetesIpBlocks,
    MemorySecurityGroup,
    NftablesSet,
)
from backend.accounts.models import AllowedIp

logger = logging.getLogger(__name__)


class SshGateway:
    """The SSH gateway asks :meth:`allows` for each connection: nothing to push."""

    name = "gateway"

    def apply(self, grants: Sequence[Grant]) -> Changes:
        return Changes()

    @staticmethod
    def allows(username: str, address: str) -> bool:
        """Whether ``address`` lies in one of the user's networks in force right now."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        networks = AllowedIp.objects.in_force().filter(
            user__username=username, user__is_active=True
        )
        return any(
            ip in ipaddress.ip_network(network)
            for network in networks.values_list("network", flat=True)
        )


def grants_in_force(at: datetime | None = None) -> list[Grant]:
    rows = (
        AllowedIp.objects.in_force(at)
        .filter(user__is_active=True)
        .values_list("user__username", "network")
    )
    return sorted(Grant(username, network) for username, network in rows)


@cache
def _memory_security_group() -> MemorySecurityGroup:
    return MemorySecurityGroup()


def configured_points() -> list[EnforcementPoint]:
    """The points TRAINYARD_ALLOWLIST_POINTS names, in that order."""
    points: list[EnforcementPoint] = []
    for name in settings.TRAINYARD_ALLOWLIST_POINTS:
        if name == "gateway":
            points.append(SshGateway())
        elif name == "nftables":
            points.append(NftablesSet(settings.TRAINYARD_NFT_COMMAND, settings.TRAINYARD_NFT_TABLE))
        elif name == "kubernetes":
            from jobmanager.backends.kubernetes import api_client_from_config

            points.append(
                KubernetesIpBlocks(
                    api_client_from_config(),
                    settings.TRAINYARD_K8S_NAMESPACE,
                    settings.TRAINYARD_JOB_SSH_PORT,
                )
            )
        elif name == "cloud":
            factory = settings.TRAINYARD_ALLOWLIST_SECURITY_GROUP
            group = _memory_security_group() if not factory else import_string(factory)()
            points.append(CloudSecurityGroup(group))
        else:
            raise ImproperlyConfigured(
                f"TRAINYARD_ALLOWLIST_POINTS: unknown point {name!r} "
                "(gateway, nftables, kubernetes, cloud)"
            )
    return points


@dataclass
class AllowlistReconciled:
    """What a reconcile of the allowlist did: grants expired, each point's changes, failures."""

    expired: int = 0
    changes: dict[str, Changes] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def reconcile(
    points: Sequence[EnforcementPoint] | None = None, now: datetime | None = None
) -> AllowlistReconciled:
    """Expire what is due, then bring every point to the grants in force. A point that
    fails is logged and retried at the next run; the others still get the list."""
    result = AllowlistReconciled(expired=len(actions.expire_allowed_ips(now)))
    grants = grants_in_force(now)
    for point in configured_points() if points is None else points:
        try:
            changes = point.apply(grants)
        except Exception as error:  # one broken point must not keep the others stale
            logger.exception("Allowlist: %s could not be reconciled", point.name)
            result.failed[point.name] = str(error)
            continue
        result.changes[point.name] = changes
        if changes:
            logger.info(
                "Allowlist on %s: added %s, removed %s",
                point.name, changes.added, changes.removed,
            )  # fmt: skip
    return result
