"""The state of the fake API server, its REST verbs and its watches, with no HTTP.

Objects are stored by resource, namespace and name, with one resource version counter
and an event history that watches replay; the test's levers (the kubelet, the node
problem detector, injected failures) change objects as their controllers would.
"""

from __future__ import annotations

import copy
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http import HTTPStatus

import kubernetes_validate

from tests.k8s_fake.kubelet import Kubelet


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    api_version: str
    namespaced: bool


RESOURCES = {
    resource.plural: resource
    for resource in (
        Resource("pods", "Pod", "v1", True),
        Resource("services", "Service", "v1", True),
        Resource("nodes", "Node", "v1", False),
        Resource("namespaces", "Namespace", "v1", False),
        Resource("networkpolicies", "NetworkPolicy", "networking.k8s.io/v1", True),
    )
}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_HISTORY_LIMIT = 10_000


@dataclass(frozen=True)
class _Event:
    version: int
    plural: str
    type: str
    object: dict


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch (a strategic merge patch of maps and scalars is the same)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def matches_selector(labels: dict[str, str], selector: str) -> bool:
    """Whether ``labels`` satisfy a label selector: ``k``, ``!k``, ``k=v``, ``k==v``,
    ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, joined by commas."""
    for requirement in re.findall(r"(?:[^,(]|\([^)]*\))+", selector or ""):
        requirement = requirement.strip()
        if not requirement:
            continue
        set_match = re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", requirement)
        if set_match:
            key, operator, values = set_match.groups()
            allowed = {value.strip() for value in values.split(",")}
            if (labels.get(key) in allowed) != (operator == "in"):
                return False
        elif "!=" in requirement:
            key, value = (part.strip() for part in requirement.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = (part.strip() for part in requirement.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:] in labels:
                return False
        elif requirement not in labels:
            return False
    return True


class ApiStore(Kubelet):
    """What the API server holds, and the test's levers on it (the kubelet's are in
    :class:`~tests.k8s_fake.kubelet.Kubelet`).

    ``watch_idle_close``: end a watch that has sent everything and heard nothing new for
    that long (a real server may end a watch at any time; this one does it early so that
    ``NodeWatcher.watch_once`` returns without waiting out its timeout).
    """

    def __init__(self, validate: bool = True, watch_idle_close: float | None = 0.05) -> None:
        self.validate = validate
        self.watch_idle_close = watch_idle_close
        self._changed = threading.Condition()
        self._objects: dict[str, dict[tuple[str, str], dict]] = {p: {} for p in RESOURCES}
        self._events: list[_Event] = []
        self._oldest_version = 0  # watches from before it get 410 Gone
        self._version = 0
        self._creates: dict[str, int] = {}
        self._create_failures: dict[tuple[str, int], tuple[int, str]] = {}
        self._read_failures: dict[str, tuple[int, int]] = {}  # plural: (reads left, code)
        self._closing = False
        self._init_kubelet()

    def close(self) -> None:
        """End every watch."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()

    # --- what a test reads --------------------------------------------------------------

    def get(self, plural: str, name: str, namespace: str = "") -> dict | None:
        with self._changed:
            found = self._objects[plural].get((namespace, name))
            return copy.deepcopy(found)

    def list(self, plural: str, namespace: str | None = None, selector: str = "") -> list[dict]:
        with self._changed:
            return [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self._objects[plural].items())
                if (namespace is None or ns == namespace)
                and matches_selector(obj["metadata"].get("labels") or {}, selector)
            ]

    # --- what a test decides (the kubelet, the node problem detector, failures) ---------

    def add_node(
        self,
        name: str,
        gpus: int = 8,
        cpu: str = "96",
        memory: str = "1024Gi",
        labels: dict[str, str] | None = None,
        ready: bool = True,
        gpu_resource: str = "nvidia.com/gpu",
    ) -> dict:
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            capacity[gpu_resource] = str(gpus)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name} | (labels or {})},
            "spec": {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": [_condition("Ready", ready, "KubeletReady" if ready else "")],
            },
        }
        with self._changed:
            return self._store("nodes", "", node, "ADDED")

    def set_node_ready(self, name: str, ready: bool, reason: str = "NodeStatusUnknown") -> None:
        self.set_node_condition(name, "Ready", ready, "KubeletReady" if ready else reason)

    def set_node_condition(
        self, name: str, condition_type: str, status: bool, reason: str = "", message: str = ""
    ) -> None:
        def change(node: dict) -> None:
            conditions = [
                c for c in node["status"].get("conditions", []) if c["type"] != condition_type
            ]
            conditions.append(_condition(condition_type, status, reason, message))
            node["status"]["conditions"] = conditions

        self._modify("nodes", "", name, change)

    def set_node_labels(self, name: str, labels: dict[str, str | None]) -> None:
        """Set labels (None removes one), as the repair manager does."""
        self._modify(
            "nodes",
            "",
            name,
            lambda node: node["metadata"].update(
                labels=merge_patch(node["metadata"].get("labels") or {}, labels)
            ),
        )

    def delete_node(self, name: str) -> None:
        with self._changed:
            self._remove("nodes", "", name)

    def finish_deletion(self, namespace: str, name: str) -> None:
        """The kubelet confirms a graceful deletion: the pod is gone."""
        with self._changed:
            pod = self._objects["pods"].get((namespace, name))
            assert pod is not None and pod["metadata"].get("deletionTimestamp"), name
            self._remove("pods", namespace, name)

    def fail_create(
        self, plural: str, nth: int = 1, code: int = 500, message: str = "injected failure"
    ) -> None:
        """The ``nth`` create of ``plural`` from now on answers ``code``, creating nothing."""
        with self._changed:
            number = self._creates.get(plural, 0) + nth
            self._create_failures[(plural, number)] = (code, message)

    def fail_reads(self, plural: str, count: int, code: int = 503) -> None:
        """The next ``count`` reads of one ``plural`` by name answer ``code``."""
        with self._changed:
            self._read_failures[plural] = (count, code)

    def read_failures_left(self, plural: str) -> int:
        with self._changed:
            return self._read_failures.get(plural, (0, 0))[0]

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older watches get 410."""
        with self._changed:
            self._events.clear()
            self._oldest_version = self._version

    # --- the store (call with self._changed held) ---------------------------------------

    def _next_version(self) -> int:
        self._version += 1
        return self._version

    def _store(self, plural: str, namespace: str, obj: dict, event: str) -> dict:
        resource = RESOURCES[plural]
        metadata = obj.setdefault("metadata", {})
        if event == "ADDED":
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", _now())
            metadata["generation"] = 1
            if resource.namespaced:
                metadata["namespace"] = namespace
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        metadata["resourceVersion"] = str(self._next_version())
        self._objects[plural][(namespace, metadata["name"])] = obj
        self._record(plural, event, obj)
        return copy.deepcopy(obj)

    def _remove(self, plural: str, namespace: str, name: str) -> dict:
        obj = self._objects[plural].pop((namespace, name))
        obj["metadata"]["resourceVersion"] = str(self._next_version())
        self._record(plural, "DELETED", obj)
        return copy.deepcopy(obj)

    def _record(self, plural: str, event: str, obj: dict) -> None:
        self._events.append(_Event(self._version, plural, event, copy.deepcopy(obj)))
        if len(self._events) > _HISTORY_LIMIT:
            dropped = self._events.pop(0)
            self._oldest_version = dropped.version
        self._changed.notify_all()

    def _modify(self, plural: str, namespace: str, name: str, change) -> dict:
        with self._changed:
            obj = copy.deepcopy(self._objects[plural][(namespace, name)])
            change(obj)
            return self._store(plural, namespace, obj, "MODIFIED")

    # --- the REST verbs -----------------------------------------------------------------

    def create(self, plural: str, namespace: str, body: dict) -> dict:
        resource = RESOURCES[plural]
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body is not an object")
        if body.get("kind", resource.kind) != resource.kind:
            raise ApiError(400, "BadRequest", f"expected kind {resource.kind}")
        metadata = body.get("metadata") or {}
        name = metadata.get("name", "")
        if metadata.get("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the object does not match")
        self._check_name(resource, name)
        if self.validate:
            self._check_schema(resource, body)
        with self._changed:
            self._creates[plural] = count = self._creates.get(plural, 0) + 1
            failure = self._create_failures.pop((plural, count), None)
            if failure is not None:
                code, message = failure
                raise ApiError(code, HTTPStatus(code).phrase.replace(" ", ""), message)
            if (namespace, name) in self._objects[plural]:
                raise ApiError(409, "AlreadyExists", f'{plural} "{name}" already exists')
            obj = copy.deepcopy(body)
            if plural == "pods":
                obj["status"] = {"phase": "Pending"}
                obj.setdefault("metadata", {})["uid"] = str(uuid.uuid4())
                self._allocate_devices(obj)
            if plural == "namespaces":
                obj["status"] = {"phase": "Active"}
            return self._store(plural, namespace, obj, "ADDED")

    def _check_name(self, resource: Resource, name: str) -> None:
        pattern = _DNS_1035_LABEL if resource.plural == "services" else _DNS_SUBDOMAIN
        if not name or len(name) > 253 or not pattern.match(name):
            raise ApiError(
                422, "Invalid", f'{resource.kind} "{name}" is invalid: metadata.name: Invalid value'
            )

    def _check_schema(self, resource: Resource, body: dict) -> None:
        manifest = {"apiVersion": resource.api_version, "kind": resource.kind} | body
        try:
            kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), True)
        except kubernetes_validate.ValidationError as error:
            first_line = str(error).splitlines()[0]
            raise ApiError(
                422, "Invalid", f'{resource.kind} "{body["metadata"].get("name")}": {first_line}'
            ) from None

    def read(self, plural: str, namespace: str, name: str) -> dict:
        with self._changed:
            left, code = self._read_failures.get(plural, (0, 0))
            if left:
                self._read_failures[plural] = (left - 1, code)
                raise ApiError(code, HTTPStatus(code).phrase.replace(" ", ""), "injected failure")
            obj = self._objects[plural].get((namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
            return copy.deepcopy(obj)

    def list_objects(self, plural: str, namespace: str | None, selector: str) -> dict:
        resource = RESOURCES[plural]
        with self._changed:
            items = self.list(plural, namespace, selector)
            version = str(self._version)
        return {
            "apiVersion": resource.api_version,
            "kind": f"{resource.kind}List",
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    def patch(
        self, plural: str, namespace: str, name: str, patch: object, subresource: str
    ) -> dict:
        if not isinstance(patch, dict):
            raise ApiError(422, "Invalid", "a patch must be an object")
        with self._changed:
            current = self.read(plural, namespace, name)
            if subresource == "status":
                patch = {"status": patch.get("status", {})}
            else:
                patch = {key: value for key, value in patch.items() if key != "status"}
            patched = merge_patch(current, patch)
            patched["metadata"]["name"] = name  # names cannot change
            return self._store(plural, namespace, patched, "MODIFIED")

    def replace(self, plural: str, namespace: str, name: str, body: dict) -> dict:
        """PUT: the object as given (status kept), if it is still the version read."""
        resource = RESOURCES[plural]
        if not isinstance(body, dict) or (body.get("metadata") or {}).get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match")
        if self.validate:
            self._check_schema(resource, body)
        with self._changed:
            current = self.read(plural, namespace, name)
            version = body["metadata"].get("resourceVersion")
            if version and version != current["metadata"]["resourceVersion"]:
                message = f'{plural} "{name}": the object has been modified'
                raise ApiError(409, "Conflict", message)
            replaced = copy.deepcopy(body)
            replaced["metadata"] = current["metadata"] | {
                key: value
                for key, value in body["metadata"].items()
                if key in ("labels", "annotations")
            }
            if "status" in current:
                replaced["status"] = current["status"]
            return self._store(plural, namespace, replaced, "MODIFIED")

    def delete(self, plural: str, namespace: str, name: str, grace: int | None) -> dict:
        with self._changed:
            obj = self.read(plural, namespace, name)
            if plural != "pods":
                removed = self._remove(plural, namespace, name)
                if plural == "networkpolicies":
                    return status_body(200, "", "", {"name": name, "kind": plural})
                return removed
            if grace is None:
                grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
            phase = obj.get("status", {}).get("phase")
            # Like the real server: unbound and ended pods have nothing to wait for.
            if grace == 0 or phase in ("Succeeded", "Failed") or not obj["spec"].get("nodeName"):
                return self._remove(plural, namespace, name)
            metadata = obj["metadata"]
            if (
                metadata.get("deletionTimestamp")
                and metadata["deletionGracePeriodSeconds"] <= grace
            ):
                return obj  # already going, at least as fast
            metadata["deletionTimestamp"] = (datetime.now(UTC) + timedelta(seconds=grace)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            metadata["deletionGracePeriodSeconds"] = grace
            return self._store(plural, namespace, obj, "MODIFIED")

    def watch(
        self, plural: str, namespace: str | None, selector: str, since: str, timeout: float
    ) -> Iterator[dict]:
        """The events of a watch, as the server sends them, until it ends."""
        deadline = time.monotonic() + timeout
        with self._changed:
            if not since or since == "0":
                version = self._version
                backlog = [
                    {"type": "ADDED", "object": obj}
                    for obj in self.list(plural, namespace, selector)
                ]
            else:
                version = int(since)
                if version < self._oldest_version:
                    message = f"too old resource version: {version} ({self._oldest_version})"
                    yield {"type": "ERROR", "object": status_body(410, "Expired", message)}
                    return
                backlog = []
        yield from backlog
        idle_since = time.monotonic()
        while True:
            with self._changed:
                pending = [event for event in self._events if event.version > version]
                if not pending:
                    now = time.monotonic()
                    ends = deadline
                    if self.watch_idle_close is not None:
                        ends = min(ends, idle_since + self.watch_idle_close)
                    if self._closing or now >= ends:
                        return
                    self._changed.wait(ends - now)
                    continue
            for event in pending:
                version = event.version
                metadata = event.object["metadata"]
                if (
                    event.plural == plural
                    and (namespace is None or metadata.get("namespace", "") == namespace)
                    and matches_selector(metadata.get("labels") or {}, selector)
                ):
                    yield {"type": event.type, "object": event.object}
            idle_since = time.monotonic()


def _condition(condition_type: str, status: bool, reason: str = "", message: str = "") -> dict:
    now = _now()
    return {
        "type": condition_type,
        "status": "True" if status else ("False" if condition_type != "Ready" else "Unknown"),
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
