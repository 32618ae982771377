"""Node sync: what the backend reports of its nodes, recorded in the database (readiness
and health; the nodes it has that the database lacks, registered)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone

from backend.clusters.actions import (
    record_node_readiness,
    record_reported_place,
    register_reported_node,
)
from backend.clusters.models import Node
from backend.core.job_manager_triggers import run_job_manager_after_commit
from jobmanager.backends import ClusterBackend

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = timedelta(seconds=30)


def sync_nodes(backend: ClusterBackend) -> list[str]:
    """Take node readiness and health from the backend; register nodes it has that the
    database lacks. A backend that reports no nodes (the memory backend) changes nothing.
    Returns the nodes whose readiness changed."""
    reported = {node.name: node for node in backend.nodes()}
    if not reported:
        return []
    bad = backend.bad_nodes()
    now = timezone.now()
    changed: list[str] = []
    for node in Node.objects.all():
        seen = reported.pop(node.name, None)
        if seen is None and node.last_heartbeat is None:
            ready, reason = False, "the cluster backend has not reported this node yet"
        elif seen is None:
            ready, reason = False, "the cluster backend no longer reports this node"
        elif not seen.ready:
            ready, reason = False, "the cluster backend reports it not ready"
        else:
            ready, reason = node.name not in bad, bad.get(node.name, "")
        stale = node.last_heartbeat is None or now - node.last_heartbeat > HEARTBEAT_EVERY
        if (ready, reason) != (node.ready, node.ready_reason) or (ready and stale):
            heartbeat = now if seen is not None else node.last_heartbeat
            if record_node_readiness(node, ready, reason, heartbeat):
                changed.append(node.name)
        if seen is not None:
            record_reported_place(node, seen)
    for new in reported.values():
        register_reported_node(new, ready=new.ready and new.name not in bad, seen_at=now)
        changed.append(new.name)
    if reported:
        run_job_manager_after_commit()  # a node registered changes what fits
    return changed
