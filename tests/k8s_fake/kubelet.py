"""What the kubelet and the device plugin do to pods in the fake API server: the pod's
status (phase, conditions, container states with their termination reasons), the
container's log, and the GPUs the device plugin hands the pod.

A test plays the kubelet through these methods; the API server side (the log endpoint
with ``follow``, ``timestamps``, ``sinceSeconds``, ``tailLines`` and ``limitBytes``) reads
what they store. The log lives as long as the pod, as the kubelet's does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta


def rfc3339_nano(moment: datetime) -> str:
    """A time as the kubelet stamps log lines: RFC 3339 with nanoseconds, trailing zeros
    of the fraction dropped (as Go's time.RFC3339Nano)."""
    fraction = f"{moment.microsecond:06d}000".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod_condition(kind: str, status: bool, reason: str = "", message: str = "") -> dict:
    condition = {"type": kind, "status": "True" if status else "False"}
    condition["lastTransitionTime"] = _now()
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


class LogEntry:
    __slots__ = ("at", "data")

    def __init__(self, at: datetime, data: bytes) -> None:
        self.at, self.data = at, data


class Kubelet:
    """The kubelet's levers, mixed into the store (which provides ``_changed``,
    ``_objects`` and ``_modify``)."""

    _changed: threading.Condition
    _objects: dict[str, dict[tuple[str, str], dict]]

    def _init_kubelet(self) -> None:
        self._pod_logs: dict[tuple[str, str, str], list[LogEntry]] = {}  # by pod uid
        self._pod_devices: dict[str, list[int]] = {}  # pod uid -> GPU indices

    # --- the pod's status ---------------------------------------------------------------

    def set_pod_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        exit_code: int | None = None,
        reason: str = "",
        waiting_reason: str = "",
        message: str = "",
    ) -> None:
        """Play the kubelet: the pod's phase, its container's state to match (a terminated
        container's ``reason`` and ``message``, say OOMKilled; a waiting one's, say
        ImagePullBackOff), and the conditions it sets; conditions set by others stay."""

        def change(pod: dict) -> None:
            container = pod["spec"]["containers"][0]
            status = pod.setdefault("status", {})
            started = status.get("startTime") or _now()
            if phase in ("Succeeded", "Failed"):
                code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
                default = "Completed" if code == 0 else "Error"
                state = {
                    "terminated": {
                        "exitCode": code,
                        "reason": reason or default,
                        "startedAt": started,
                        "finishedAt": _now(),
                    }
                }
                if message:
                    state["terminated"]["message"] = message
            elif phase == "Running":
                state = {"running": {"startedAt": _now()}}
            else:
                state = {"waiting": {"reason": waiting_reason or "ContainerCreating"}}
                if message:
                    state["waiting"]["message"] = message
            running = phase == "Running"
            own = {"PodScheduled", "Initialized", "ContainersReady", "Ready"}
            others = [c for c in status.get("conditions", []) if c["type"] not in own]
            ready_reason = "" if running else ("PodCompleted" if phase != "Pending" else "")
            not_ready = "" if running or phase != "Pending" else "ContainersNotReady"
            status.update(
                phase=phase,
                startTime=started,
                hostIP="10.0.0.1",
                conditions=[
                    _pod_condition("PodScheduled", True),
                    _pod_condition("Initialized", True),
                    _pod_condition("ContainersReady", running, ready_reason or not_ready),
                    _pod_condition("Ready", running, ready_reason or not_ready),
                    *others,
                ],
                containerStatuses=[
                    {
                        "name": container["name"],
                        "image": container.get("image", ""),
                        "imageID": "",
                        "ready": running,
                        "restartCount": 0,
                        "started": running,
                        "state": state,
                    }
                ],
            )
            if phase not in ("Succeeded", "Failed"):
                status.pop("reason", None)  # a pod-level reason is set_pod_reason's
                status.pop("message", None)

        self._modify("pods", namespace, name, change)

    def set_pod_reason(self, namespace: str, name: str, reason: str, message: str = "") -> None:
        """The pod's own reason and message (Evicted, DeadlineExceeded, OutOfcpu...)."""

        def change(pod: dict) -> None:
            pod.setdefault("status", {}).update(reason=reason, message=message)

        self._modify("pods", namespace, name, change)

    def set_pod_condition(
        self,
        namespace: str,
        name: str,
        kind: str,
        status: bool,
        reason: str = "",
        message: str = "",
    ) -> None:
        """A pod condition, as a controller sets it: ``DisruptionTarget`` before an
        eviction, ``PodScheduled`` False with ``Unschedulable``..."""

        def change(pod: dict) -> None:
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c["type"] != kind]
            conditions.append(_pod_condition(kind, status, reason, message))

        self._modify("pods", namespace, name, change)

    # --- the container's log ------------------------------------------------------------

    def write_pod_log(self, namespace: str, name: str, text: str | bytes) -> None:
        """The container writes ``text``: each line becomes a log entry, stamped now."""
        data = text.encode() if isinstance(text, str) else text
        with self._changed:
            pod = self._objects["pods"][(namespace, name)]
            entries = self._pod_logs.setdefault(_log_key(pod), [])
            for line in data.splitlines(keepends=True):
                entries.append(LogEntry(datetime.now(UTC), line))
            self._changed.notify_all()

    def pod_log(self, namespace: str, name: str, query: dict[str, str]) -> Iterator[bytes]:
        """The log endpoint's body: what the container wrote, stamped when asked, from
        ``sinceSeconds`` or the last ``tailLines``, cut at ``limitBytes``; with ``follow``
        it goes on until the container has terminated (or the pod is gone)."""
        from tests.k8s_fake.store import ApiError

        with self._changed:
            pod = self._objects["pods"].get((namespace, name))
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            container = query.get("container") or pod["spec"]["containers"][0]["name"]
            if container not in [c["name"] for c in pod["spec"]["containers"]]:
                raise ApiError(
                    400, "BadRequest", f"container {container} is not valid for pod {name}"
                )
            waiting = _container_state(pod).get("waiting")
            if waiting is not None or not _container_state(pod):
                why = (waiting or {}).get("reason", "ContainerCreating")
                raise ApiError(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{name}" is waiting to start: {why}',
                )
            key = _log_key(pod)
            entries = list(self._pod_logs.get(key, []))
        return self._log_chunks(namespace, name, key, entries, query)

    def _log_chunks(
        self,
        namespace: str,
        name: str,
        key: tuple[str, str, str],
        entries: list[LogEntry],
        query: dict[str, str],
    ) -> Iterator[bytes]:
        position = len(entries)
        since = query.get("sinceSeconds")
        if since is not None:
            cutoff = datetime.now(UTC) - timedelta(seconds=int(since))
            entries = [entry for entry in entries if entry.at >= cutoff]
        if query.get("tailLines") is not None:
            entries = entries[-int(query["tailLines"]) :] if int(query["tailLines"]) else []
        stamped = query.get("timestamps") in ("true", "1")
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        follow = query.get("follow") in ("true", "1")
        sent_bytes = 0
        while True:
            for entry in entries:
                data = (rfc3339_nano(entry.at).encode() + b" " if stamped else b"") + entry.data
                if limit is not None and sent_bytes + len(data) > limit:
                    yield data[: limit - sent_bytes]
                    return
                sent_bytes += len(data)
                yield data
            if not follow:
                return
            with self._changed:
                current = self._pod_logs.get(key, [])
                while len(current) <= position:
                    pod = self._objects["pods"].get((namespace, name))
                    gone = pod is None or _log_key(pod) != key
                    if gone or "terminated" in _container_state(pod) or self._closing_logs():
                        return
                    self._changed.wait(0.5)
                    current = self._pod_logs.get(key, [])
                entries = current[position:]
                position = len(current)

    def _closing_logs(self) -> bool:
        return bool(getattr(self, "_closing", False))

    # --- the device plugin ----------------------------------------------------------------

    def _allocate_devices(self, pod: dict, gpu_resource: str = "nvidia.com/gpu") -> None:
        """The device plugin's choice for a new pod: the lowest GPU indices of its node that
        no other pod holds (call with ``_changed`` held). It knows nothing of the indices
        Trainyard's scheduler recorded."""
        node = pod["spec"].get("nodeName")
        wanted = sum(
            int(c.get("resources", {}).get("limits", {}).get(gpu_resource, 0))
            for c in pod["spec"]["containers"]
        )
        if not node or not wanted:
            return
        node_obj = self._objects["nodes"].get(("", node))
        total = int((node_obj or {}).get("status", {}).get("capacity", {}).get(gpu_resource, 0))
        held = {
            index
            for other in self._objects["pods"].values()
            if other["spec"].get("nodeName") == node
            for index in self._pod_devices.get(other["metadata"].get("uid", ""), [])
        }
        free = [index for index in range(total) if index not in held]
        if len(free) >= wanted:
            self._pod_devices[pod["metadata"]["uid"]] = free[:wanted]

    def pod_devices(self, namespace: str, name: str) -> list[int]:
        """The GPU indices the device plugin gave the pod (the kubelet's pod-resources
        API answers this on the node; dcgm-exporter labels those GPUs with the pod)."""
        with self._changed:
            pod = self._objects["pods"].get((namespace, name))
            return list(self._pod_devices.get(pod["metadata"]["uid"], [])) if pod else []


def _log_key(pod: dict) -> tuple[str, str, str]:
    metadata = pod["metadata"]
    return metadata.get("namespace", ""), metadata["name"], metadata.get("uid", "")


def _container_state(pod: dict) -> dict:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return statuses[0].get("state", {}) if statuses else {}
