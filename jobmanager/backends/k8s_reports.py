"""What the Kubernetes backend reports of a job: each worker's state from its pod, and why
it failed or never started, in the words the retry rules read.

A failed worker's reason is, first that applies: a disruption the cluster made
(``DisruptionTarget: TerminationByKubelet: ...``), the pod's own reason (``Evicted``,
``DeadlineExceeded``, ``OutOfnvidia.com/gpu``), the container's termination reason
(``OOMKilled``, ``Error``, ``ContainerCannotRun``), each with its message after ": ". A
worker whose pod is not running within the start timeout is failed with why it waits
(``ImagePullBackOff: ...``, ``Unschedulable: ...``) and the time it was given; a worker
the backend stopped is ``Stopped``, so that the peer whose failure caused the stop
explains the attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubernetes import client

from jobmanager.backends.base import (
    NODE_UNHEALTHY,
    STOPPED,
    JobReport,
    WorkerReport,
    WorkerState,
)
from jobmanager.backends.k8s_manifests import (
    ANNOTATION_DEPLOYED,
    ANNOTATION_JOB_ID,
    ANNOTATION_RESIZED_AT,
    ANNOTATION_ROUND,
    ANNOTATION_ROUND_DEPLOYED,
    ANNOTATION_STOP_REQUESTED,
    ANNOTATION_WORKERS,
    CONTAINER_NAME,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_RANK,
    LABEL_ROUND,
    service_name,
)
from jobmanager.backends.k8s_objects import (
    HasMetadata,
    annotations_of,
    labels_of,
    metadata_of,
    node_name_of,
    uid_of,
)

# A pod waiting for one of these never starts: it fails at once. Anything else (image
# pull back-off, a volume that does not mount yet) may still resolve, until the start
# timeout.
FATAL_WAITING_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
COLLECTING_LOG = "CollectingLog"  # ended, but its log is not all in the store yet


@dataclass(frozen=True)
class ReportContext:
    """What a report needs besides the pods: bad nodes, the time, the start timeout, and
    the pods (by uid) whose log is complete in the store (None: logs are not collected)."""

    bad_nodes: dict[str, str]
    now: float
    start_timeout_seconds: float
    logs_complete: set[str] | None = field(default=None)


def attempt_of(obj: HasMetadata) -> int:
    return int(labels_of(obj).get(LABEL_ATTEMPT, "0"))


def rank_of(pod: client.V1Pod) -> int:
    return int(labels_of(pod)[LABEL_RANK])


def round_of(pod: client.V1Pod) -> int:
    """The elastic rendezvous round the pod belongs to (0: as deployed)."""
    return int(labels_of(pod).get(LABEL_ROUND, "0"))


def service_round(service: client.V1Service | None, annotation: str = ANNOTATION_ROUND) -> int:
    """The round a resize brings the attempt's pods to (or, with
    ``ANNOTATION_ROUND_DEPLOYED``, the last whose pods all exist); 0 before any resize."""
    return int(annotations_of(service).get(annotation, "0")) if service is not None else 0


def job_id_of(obj: HasMetadata) -> str:
    return annotations_of(obj).get(ANNOTATION_JOB_ID) or labels_of(obj)[LABEL_JOB]


def container_state(pod: client.V1Pod) -> client.V1ContainerState | None:
    statuses = (pod.status and pod.status.container_statuses) or []
    status = next((s for s in statuses if s.name == CONTAINER_NAME), None)
    return status.state if status else None


def pod_ended(pod: client.V1Pod) -> bool:
    return bool(pod.status and pod.status.phase in ("Succeeded", "Failed"))


def marked(service: client.V1Service | None, annotation: str) -> bool:
    return service is not None and annotations_of(service).get(annotation) == "true"


def _said(reason: str, message: str | None) -> str:
    message = " ".join((message or "").split())
    return f"{reason}: {message}" if message else reason


def failure_reason(pod: client.V1Pod) -> str:
    """Why a failed pod failed (see the module docstring)."""
    status = pod.status or client.V1PodStatus()
    for condition in status.conditions or []:
        if condition.type == "DisruptionTarget" and condition.status == "True":
            return _said("DisruptionTarget", _said(condition.reason or "", condition.message))
    if status.reason:
        return _said(status.reason, status.message)
    state = container_state(pod)
    terminated = state.terminated if state else None
    if terminated is not None and terminated.reason:
        return _said(terminated.reason, terminated.message)
    return "Failed"


def waiting_reason(pod: client.V1Pod) -> str:
    """Why a pending pod is not running yet: its container's waiting reason, else a
    condition that is not met (PodScheduled: Unschedulable), else "Pending"."""
    state = container_state(pod)
    if state is not None and state.waiting is not None and state.waiting.reason:
        return _said(state.waiting.reason, state.waiting.message)
    for condition in (pod.status and pod.status.conditions) or []:
        if condition.status == "False" and condition.reason:
            return _said(condition.reason, condition.message)
    return "Pending"


def not_started(pod: client.V1Pod, context: ReportContext) -> str | None:
    """The verdict on a pod not running within the start timeout (or waiting for what
    never comes), or None while it may still start."""
    if (pod.status and pod.status.phase) not in (None, "Pending"):
        return None
    why = waiting_reason(pod)
    if why.split(":", 1)[0] in FATAL_WAITING_REASONS:
        return why
    created = metadata_of(pod).creation_timestamp
    if created is None or context.now - created.timestamp() < context.start_timeout_seconds:
        return None
    return f"{why}; not running after {context.start_timeout_seconds:g} s"


def ending(pod: client.V1Pod, attempt: int) -> str:
    """How the pod's container ended, for the last line of its log."""
    if pod_ended(pod):
        state = container_state(pod)
        code = state.terminated.exit_code if state and state.terminated else None
        said = "exit code unknown" if code is None else f"exit code {code}"
        if pod.status is not None and pod.status.phase == "Failed":
            said += f" ({failure_reason(pod)})"
        return f"attempt {attempt} ended: {said}"
    return f"attempt {attempt} did not start: {waiting_reason(pod)}"


def worker_report(
    rank: int, pod: client.V1Pod, context: ReportContext, stopping: bool = False
) -> WorkerReport:
    """A worker's state from its pod's phase, its exit code and reason from its
    container's and its own. ``stopping``: the backend was asked to stop the job."""
    phase = (pod.status and pod.status.phase) or "Pending"
    state = container_state(pod)
    terminated = state.terminated if state else None
    exit_code = terminated.exit_code if terminated else None
    complete = context.logs_complete is None or uid_of(pod) in context.logs_complete
    if phase in ("Succeeded", "Failed") and not complete:
        return WorkerReport(rank, WorkerState.RUNNING, None, COLLECTING_LOG)
    if phase == "Succeeded":
        return WorkerReport(rank, WorkerState.SUCCEEDED, 0 if exit_code is None else exit_code)
    if phase == "Failed":
        reason = failure_reason(pod)
        if stopping and metadata_of(pod).deletion_timestamp is not None:
            reason = reason if reason.startswith("DisruptionTarget") else STOPPED
        return WorkerReport(rank, WorkerState.FAILED, exit_code, reason)
    node = node_name_of(pod)
    if node is not None and node in context.bad_nodes:
        return WorkerReport(
            rank,
            WorkerState.FAILED,
            None,
            f"{NODE_UNHEALTHY}: node {node}: {context.bad_nodes[node]}",
        )
    if phase == "Unknown":  # the node stopped reporting on its pods
        return WorkerReport(
            rank, WorkerState.FAILED, None, f"{NODE_UNHEALTHY}: node {node}: pod phase Unknown"
        )
    if phase == "Running":
        return WorkerReport(rank, WorkerState.RUNNING)
    verdict = not_started(pod, context)
    if verdict is not None:
        if not complete:
            return WorkerReport(rank, WorkerState.PENDING, None, COLLECTING_LOG)
        return WorkerReport(rank, WorkerState.FAILED, None, verdict)
    return WorkerReport(rank, WorkerState.PENDING, None, waiting_reason(pod).split(":", 1)[0])


def job_report(
    job_id: str,
    pods: list[client.V1Pod],
    services: dict[str, client.V1Service],
    context: ReportContext,
) -> JobReport:
    """The latest attempt among ``pods``, at its latest round (the pods of a round a
    resize replaced are left out, whatever their end). A rank without a pod is pending
    while the attempt (or a resize of it) is being deployed, up to the start timeout;
    once it was, it failed (its pod was deleted or evicted), or was stopped when the
    backend was asked to stop the job."""
    attempt = max(
        [attempt_of(pod) for pod in pods]
        or [attempt_of(s) for s in services.values() if job_id_of(s) == job_id]
    )
    service = services.get(service_name(job_id, attempt))
    round_number = service_round(service)
    current = [pod for pod in pods if attempt_of(pod) == attempt and round_of(pod) == round_number]
    by_rank = {rank_of(pod): pod for pod in current}
    if round_number > 0 and service is not None:  # resized: the Service says the size
        workers = int(annotations_of(service).get(ANNOTATION_WORKERS, 0))
    else:
        workers = max(
            [int(annotations_of(pod).get(ANNOTATION_WORKERS, 0)) for pod in current]
            + [rank + 1 for rank in by_rank]
        )
    being_resized = service is not None and resizing(service)
    deployed = marked(service, ANNOTATION_DEPLOYED) and not being_resized
    stopping = marked(service, ANNOTATION_STOP_REQUESTED)
    reports = []
    for rank in range(workers):
        pod = by_rank.get(rank)
        if pod is not None:
            reports.append(worker_report(rank, pod, context, stopping))
        elif deployed:
            reason = STOPPED if stopping else "PodMissing"
            reports.append(WorkerReport(rank, WorkerState.FAILED, None, reason))
        elif being_resized:
            reports.append(_resizing(rank, service, context))
        else:
            reports.append(WorkerReport(rank, WorkerState.PENDING, None, "Deploying"))
    return JobReport(job_id=job_id, attempt=attempt, workers=tuple(reports))


def resizing(service: client.V1Service) -> bool:
    """Whether a resize of the Service's attempt has yet to create every pod."""
    return service_round(service) > service_round(service, ANNOTATION_ROUND_DEPLOYED)


def _resizing(rank: int, service: client.V1Service | None, context: ReportContext) -> WorkerReport:
    """A worker whose pod a resize has yet to create: pending, or failed once the resize
    has taken longer than the start timeout (the process making it was lost)."""
    began = float(annotations_of(service).get(ANNOTATION_RESIZED_AT, "0")) if service else 0.0
    if context.now - began < context.start_timeout_seconds:
        return WorkerReport(rank, WorkerState.PENDING, None, "Resizing")
    why = f"Resizing: its pod not created after {context.start_timeout_seconds:g} s"
    return WorkerReport(rank, WorkerState.FAILED, None, why)
