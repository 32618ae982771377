"""The Kubernetes backend: one pod per worker on the node the core chose.

Each attempt gets a headless Service (worker DNS names, MASTER_ADDR) and its pods; each VC
a NetworkPolicy (see :mod:`jobmanager.backends.k8s_manifests`). Deployments are all or
nothing: the Service is marked deployed once every pod exists, and any failure removes
what the attempt had created. A :class:`NodeWatcher` follows the Node objects, so that
workers on a node that turned bad are reported failed at once, without waiting for a
collective to time out.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from jobmanager.backends.base import (
    NODE_UNHEALTHY,
    BackendNode,
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    JobReport,
    LaunchRefused,
    WorkerReport,
    WorkerState,
)
from jobmanager.backends.k8s_manifests import (
    ANNOTATION_DEPLOYED,
    ANNOTATION_JOB_ID,
    ANNOTATION_WORKERS,
    CONTAINER_NAME,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_RANK,
    KubernetesSettings,
    VolumeSettings,
    job_selector,
    network_policy_manifest,
    pod_manifest,
    service_manifest,
    service_name,
)
from jobmanager.backends.k8s_nodes import NodeWatcher, backend_node

__all__ = ["KubernetesBackend", "KubernetesSettings", "NodeWatcher", "VolumeSettings"]

logger = logging.getLogger(__name__)

# A pod waiting for one of these never starts; anything else (image pull back-off, a
# missing secret) may still resolve, so the worker stays pending.
FATAL_WAITING_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError)


def api_client_from_config() -> client.ApiClient:
    """A client for the cluster this process runs in, else the one KUBECONFIG (or
    ~/.kube/config) names."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        # Read KUBECONFIG now: the client reads it once, when it is imported.
        config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    return client.ApiClient(configuration)


# --- pods -------------------------------------------------------------------------------


def _attempt(obj) -> int:
    return int((obj.metadata.labels or {}).get(LABEL_ATTEMPT, "0"))


def _container_state(pod: client.V1Pod) -> client.V1ContainerState | None:
    statuses = (pod.status and pod.status.container_statuses) or []
    status = next((s for s in statuses if s.name == CONTAINER_NAME), None)
    return status.state if status else None


def pod_ended(pod: client.V1Pod) -> bool:
    return bool(pod.status and pod.status.phase in ("Succeeded", "Failed"))


def worker_report(rank: int, pod: client.V1Pod, bad_nodes: dict[str, str]) -> WorkerReport:
    """A worker's state from its pod's phase, its exit code from the container's."""
    phase = (pod.status and pod.status.phase) or "Pending"
    state = _container_state(pod)
    terminated = state.terminated if state else None
    exit_code = terminated.exit_code if terminated else None
    if phase == "Succeeded":
        return WorkerReport(rank, WorkerState.SUCCEEDED, 0 if exit_code is None else exit_code)
    if phase == "Failed":
        reason = (terminated and terminated.reason) or pod.status.reason or "Failed"
        return WorkerReport(rank, WorkerState.FAILED, exit_code, reason)
    node = pod.spec.node_name
    if node in bad_nodes:
        return WorkerReport(
            rank, WorkerState.FAILED, None, f"{NODE_UNHEALTHY}: node {node}: {bad_nodes[node]}"
        )
    if phase == "Unknown":  # the node stopped reporting on its pods
        return WorkerReport(
            rank, WorkerState.FAILED, None, f"{NODE_UNHEALTHY}: node {node}: pod phase Unknown"
        )
    if phase == "Running":
        return WorkerReport(rank, WorkerState.RUNNING)
    waiting = (state.waiting.reason if state and state.waiting else "") or ""
    if waiting in FATAL_WAITING_REASONS:
        return WorkerReport(rank, WorkerState.FAILED, None, waiting)
    return WorkerReport(rank, WorkerState.PENDING, None, waiting)


def job_report(
    job_id: str,
    pods: list[client.V1Pod],
    services: dict[str, client.V1Service],
    bad_nodes: dict[str, str],
) -> JobReport:
    """The latest attempt among ``pods``. A rank without a pod is pending while the
    attempt is being deployed, and failed once it was (its pod was deleted or evicted)."""
    attempt = max(_attempt(pod) for pod in pods)
    current = [pod for pod in pods if _attempt(pod) == attempt]
    by_rank = {int(pod.metadata.labels[LABEL_RANK]): pod for pod in current}
    workers = max(
        max(int((pod.metadata.annotations or {}).get(ANNOTATION_WORKERS, 0)) for pod in current),
        max(by_rank) + 1,
    )
    service = services.get(service_name(job_id, attempt))
    deployed = service is not None and _marked_deployed(service)
    reports = []
    for rank in range(workers):
        pod = by_rank.get(rank)
        if pod is not None:
            reports.append(worker_report(rank, pod, bad_nodes))
        elif deployed:
            reports.append(WorkerReport(rank, WorkerState.FAILED, None, "PodMissing"))
        else:
            reports.append(WorkerReport(rank, WorkerState.PENDING, None, "Deploying"))
    return JobReport(job_id=job_id, attempt=attempt, workers=tuple(reports))


def _marked_deployed(service: client.V1Service) -> bool:
    return (service.metadata.annotations or {}).get(ANNOTATION_DEPLOYED) == "true"


def _job_id(obj) -> str:
    return (obj.metadata.annotations or {}).get(ANNOTATION_JOB_ID) or obj.metadata.labels[LABEL_JOB]


def describe_api_error(error: Exception) -> str:
    if not isinstance(error, ApiException):
        return f"{type(error).__name__}: {error}"
    try:
        message = json.loads(error.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f"{error.status} {error.reason}" + (f": {message}" if message else "")


# --- the backend --------------------------------------------------------------------------


class KubernetesBackend(ClusterBackend):
    name = "kubernetes"

    def __init__(
        self,
        settings: KubernetesSettings | None = None,
        api_client: client.ApiClient | None = None,
        watch_nodes: bool = True,
    ) -> None:
        """``watch_nodes``: follow the nodes in a thread started on first use (in the
        process that uses the backend, after any fork); without it the node cache is
        listed once and then moves only by ``node_watcher.watch_once``."""
        self.settings = settings or KubernetesSettings()
        self.api_client = api_client or api_client_from_config()
        self.core = client.CoreV1Api(self.api_client)
        self.networking = client.NetworkingV1Api(self.api_client)
        self.node_watcher = NodeWatcher(self.core, self.settings)
        self.watch_nodes = watch_nodes

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def _node_cache(self) -> NodeWatcher:
        if self.watch_nodes:
            self.node_watcher.start()
        self.node_watcher.ensure_synced()
        return self.node_watcher

    def close(self) -> None:
        self.node_watcher.stop()
        self.api_client.close()

    # --- the interface ------------------------------------------------------------------

    def isolation(self, launch: JobLaunch) -> Isolation:
        who = launch.run_as.describe() if launch.run_as else "nobody: the owner has no account"
        return Isolation(
            run_as=f"{who}, set by the pod's securityContext (no root, no capabilities)",
            limits="Kubernetes: requests equal to limits of CPU and memory per worker (cgroups)",
        )

    def deploy(self, launch: JobLaunch) -> None:
        name = service_name(launch.job_id, launch.attempt)
        try:
            for worker in launch.workers:  # every pod's manifest, before anything is made
                pod_manifest(launch, worker, self.settings)
        except ValueError as error:
            raise LaunchRefused(f"Job {launch.job_id} cannot run here: {error}.") from error
        try:
            if self._deployed_already(launch):
                return
            self._ensure_network_policy(launch.vc)  # before any pod: none runs unprotected
            self._create(
                self.core.create_namespaced_service, service_manifest(launch, self.settings)
            )
            for worker in launch.workers:
                self._create(
                    self.core.create_namespaced_pod, pod_manifest(launch, worker, self.settings)
                )
            self.core.patch_namespaced_service(
                name, self.namespace, {"metadata": {"annotations": {ANNOTATION_DEPLOYED: "true"}}}
            )
        except API_ERRORS as error:
            try:
                self.remove(launch.job_id)
            except API_ERRORS:
                logger.exception("cleaning up after the failed deployment of %s", launch.job_id)
            raise DeployError(
                f"deploying {launch.job_id} attempt {launch.attempt} failed "
                f"({describe_api_error(error)}); what was created is removed"
            ) from error

    def _deployed_already(self, launch: JobLaunch) -> bool:
        """Whether the attempt is deployed in full. An earlier attempt's objects are
        force-deleted first, so that nothing of it sticks in Terminating."""
        pods, services = self._job_objects(launch.job_id)
        self._delete_all(
            [pod for pod in pods if _attempt(pod) != launch.attempt],
            [service for service in services if _attempt(service) != launch.attempt],
        )
        name = service_name(launch.job_id, launch.attempt)
        return any(s.metadata.name == name and _marked_deployed(s) for s in services)

    def stop(self, job_id: str, grace_seconds: float) -> None:
        """Delete the job's running and pending pods with the grace period (at once for a
        pod on a bad node, whose kubelet would never confirm); ended pods stay until
        ``remove``, keeping their exit codes."""
        grace = max(0, math.ceil(grace_seconds))
        bad_nodes = self._node_cache().bad_nodes()
        for pod in self._pods(job_id):
            if pod_ended(pod):
                continue
            pod_grace = 0 if pod.spec.node_name in bad_nodes else grace
            going = pod.metadata.deletion_grace_period_seconds
            if pod.metadata.deletion_timestamp is not None and (going or 0) <= pod_grace:
                continue  # already stopping, as fast as asked
            self._delete_pod(pod.metadata.name, pod_grace)

    def reports(self) -> dict[str, JobReport]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=job_selector()).items
        if not pods:
            return {}
        services = self.core.list_namespaced_service(
            self.namespace, label_selector=job_selector()
        ).items
        cache = self._node_cache()
        bad_nodes = cache.bad_nodes()
        known = cache.names()
        for pod in pods:  # a pod bound to a node that is gone never runs
            node = pod.spec.node_name
            if node and node not in known:
                bad_nodes.setdefault(node, "node deleted")
        pods_by_job: dict[str, list[client.V1Pod]] = defaultdict(list)
        for pod in pods:
            pods_by_job[_job_id(pod)].append(pod)
        services_by_name = {service.metadata.name: service for service in services}
        return {
            job_id: job_report(job_id, job_pods, services_by_name, bad_nodes)
            for job_id, job_pods in pods_by_job.items()
        }

    def remove(self, job_id: str) -> None:
        pods, services = self._job_objects(job_id)
        self._delete_all(pods, services)

    def nodes(self) -> list[BackendNode]:
        return sorted(
            (backend_node(node, self.settings) for node in self._node_cache().nodes()),
            key=lambda node: node.name,
        )

    def cordon(self, node: str, cordoned: bool) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": cordoned}})

    def bad_nodes(self) -> dict[str, str]:
        """The nodes whose jobs are reported failed at once, with why."""
        return self._node_cache().bad_nodes()

    # --- helpers ------------------------------------------------------------------------

    def _pods(self, job_id: str) -> list[client.V1Pod]:
        return self.core.list_namespaced_pod(
            self.namespace, label_selector=job_selector(job_id)
        ).items

    def _job_objects(self, job_id: str) -> tuple[list[client.V1Pod], list[client.V1Service]]:
        services = self.core.list_namespaced_service(
            self.namespace, label_selector=job_selector(job_id)
        ).items
        return self._pods(job_id), services

    def _create(self, create: Callable, manifest: dict) -> None:
        """Create an object; one already there (an interrupted deploy of this same
        attempt made it) is fine."""
        try:
            create(self.namespace, manifest)
        except ApiException as error:
            if error.status != 409:
                raise

    def _ensure_network_policy(self, vc: str) -> None:
        """Create the VC's policy, or bring one written by another version up to date
        (replaced whole: a merge could keep a selector that narrows what it protects)."""
        manifest = network_policy_manifest(vc, self.settings)
        name = manifest["metadata"]["name"]
        try:
            current = self.networking.read_namespaced_network_policy(name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            self._create(self.networking.create_namespaced_network_policy, manifest)
            return
        if self.api_client.sanitize_for_serialization(current.spec) != manifest["spec"]:
            manifest["metadata"]["resourceVersion"] = current.metadata.resource_version
            self.networking.replace_namespaced_network_policy(name, self.namespace, manifest)

    def _delete_pod(self, name: str, grace_seconds: int) -> None:
        _ignore_not_found(
            lambda: self.core.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=grace_seconds
            )
        )

    def _delete_all(self, pods: Iterable[client.V1Pod], services: Iterable[client.V1Service]):
        for pod in pods:
            self._delete_pod(pod.metadata.name, 0)
        for service in services:
            name = service.metadata.name
            _ignore_not_found(
                lambda name=name: self.core.delete_namespaced_service(name, self.namespace)
            )


def _ignore_not_found(call: Callable[[], object]) -> None:
    try:
        call()
    except ApiException as error:
        if error.status != 404:
            raise
