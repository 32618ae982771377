"""The cluster's nodes as the Kubernetes backend sees them: capacity, readiness, and
whether a node turned bad (NotReady, a failing condition from the node problem detector,
or taken out of service by the repair manager), kept current by a watch.
"""

from __future__ import annotations

import logging
import threading
from decimal import Decimal
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from jobmanager.backends.base import BackendNode
from jobmanager.backends.k8s_manifests import KubernetesSettings
from jobmanager.backends.k8s_objects import labels_of, metadata_of, name_of

logger = logging.getLogger(__name__)

MIB = 2**20


def _conditions(node: client.V1Node) -> list[client.V1NodeCondition]:
    return list((node.status and node.status.conditions) or [])


def node_problem(node: client.V1Node, settings: KubernetesSettings) -> str | None:
    """Why no job can go on running on ``node``, or None when it is healthy."""
    conditions = _conditions(node)
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if ready is None or ready.status != "True":
        detail = (ready.reason or ready.status) if ready else "no Ready condition"
        return f"NotReady ({detail})"
    for condition in conditions:
        if condition.type in settings.bad_condition_types and condition.status == "True":
            return f"{condition.type} ({condition.reason or condition.message or 'True'})"
    state = labels_of(node).get(settings.repair_label)
    if state is not None and state != settings.in_service_value:
        return f"{settings.repair_label}={state}"
    return None


def _quantity(resources: dict[str, str], name: str) -> Decimal:
    quantity: Decimal = parse_quantity(resources.get(name, "0"))
    return quantity


def backend_node(node: client.V1Node, settings: KubernetesSettings) -> BackendNode:
    """What the core needs of a Node. Allocatable (what the kubelet admits pods against),
    falling back to capacity for a resource the node does not list as allocatable."""
    status = node.status or client.V1NodeStatus()
    resources = dict(status.capacity or {}) | dict(status.allocatable or {})
    labels = dict(labels_of(node))
    gpus = int(_quantity(resources, settings.gpu_resource))
    gpu_type = next((labels[key] for key in settings.gpu_type_labels if labels.get(key)), "")
    switch = next((labels[key] for key in settings.switch_labels if labels.get(key)), "")
    rack = next((labels[key] for key in settings.rack_labels if labels.get(key)), "")
    ready = any(c.type == "Ready" and c.status == "True" for c in _conditions(node))
    return BackendNode(
        name=name_of(node),
        gpu_type=gpu_type or ("" if gpus else "cpu"),
        gpus=gpus,
        millicpus=int(_quantity(resources, "cpu") * 1000),
        memory=int(_quantity(resources, "memory") / MIB),
        labels=labels,
        ready=ready,
        switch=switch,
        rack=rack,
    )


class NodeWatcher:
    """A thread-safe cache of the cluster's Node objects, kept current by a watch.

    ``watch_once`` applies one watch's events (tests call it; a watch ends after its
    timeout, or whenever the server closes it). ``start`` runs it in a daemon thread
    forever. A watch the server refuses as too old (410 Gone) is resumed from a new list.
    """

    def __init__(self, core: client.CoreV1Api, settings: KubernetesSettings) -> None:
        self._core = core
        self._settings = settings
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._nodes: dict[str, client.V1Node] = {}
        self._resource_version: str | None = None
        self._synced = False
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._watch: watch.Watch | None = None

    def sync(self) -> None:
        """Replace the cache with a fresh list of the nodes."""
        with self._sync_lock:
            listed = self._core.list_node()
            with self._lock:
                self._nodes = {name_of(node): node for node in listed.items}
                listed_meta = listed.metadata
                self._resource_version = listed_meta.resource_version if listed_meta else None
                self._synced = True

    def ensure_synced(self) -> None:
        if not self._synced:
            self.sync()

    def watch_once(self, timeout_seconds: int = 60) -> int:
        """Apply the events of one watch from where the cache stands; returns how many.

        The server ends the watch after ``timeout_seconds`` at the latest."""
        self.ensure_synced()
        stream = watch.Watch()
        self._watch = stream
        applied = 0
        try:
            for event in stream.stream(
                self._core.list_node,
                resource_version=self._resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
                _request_timeout=(10, timeout_seconds + 10),  # a server that went silent
            ):
                self._apply(event)
                applied += 1
        except ApiException as error:
            if error.status != 410:
                raise
            logger.info("node watch expired (410 Gone); listing the nodes again")
            self.sync()
        finally:
            self._watch = None
        return applied

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "BOOKMARK":
            version = event["raw_object"].get("metadata", {}).get("resourceVersion")
            with self._lock:
                self._resource_version = version or self._resource_version
            return
        node: client.V1Node = event["object"]
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(name_of(node), None)
            else:
                self._nodes[name_of(node)] = node
            self._resource_version = metadata_of(node).resource_version

    def start(self, timeout_seconds: int = 300) -> None:
        """Watch in a daemon thread until :meth:`stop` (no-op when already watching)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, args=(timeout_seconds,), name="trainyard-node-watcher", daemon=True
        )
        self._thread.start()

    def stop(self, join_seconds: float = 10) -> None:
        self._stopping.set()
        current = self._watch
        if current is not None:
            current.stop()
        if self._thread is not None:
            self._thread.join(join_seconds)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self, timeout_seconds: int) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                self.watch_once(timeout_seconds)
                failures = 0
            except Exception:  # the API server restarting, a network blip: try again
                failures += 1
                logger.warning("node watch failed (%d in a row)", failures, exc_info=True)
                self._stopping.wait(min(30.0, 0.5 * 2**failures))

    def nodes(self) -> list[client.V1Node]:
        with self._lock:
            return list(self._nodes.values())

    def names(self) -> set[str]:
        with self._lock:
            return set(self._nodes)

    def bad_nodes(self) -> dict[str, str]:
        """The nodes no job can go on running on, with why."""
        problems = ((name_of(node), node_problem(node, self._settings)) for node in self.nodes())
        return {name: problem for name, problem in problems if problem is not None}
