"""The Kubernetes backend: one pod per worker on the node the core chose.

Each attempt gets a headless Service (worker DNS names, MASTER_ADDR) and its pods; each job
a NetworkPolicy that admits only its own pods and the SSH gateway's
(:mod:`jobmanager.backends.k8s_policies`). Deployments are all or
nothing: the Service is marked deployed once every pod exists, and any failure removes
what the attempt had created. A :class:`NodeWatcher` follows the Node objects, so that
workers on a node that turned bad are reported failed at once, without waiting for a
collective to time out. Workers' logs are streamed into the log store
(:mod:`jobmanager.backends.k8s_logs`); why a worker failed, or never started within the
start timeout, is reported in the words the retry rules read
(:mod:`jobmanager.backends.k8s_reports`).

A running elastic job is resized as the local backend resizes it (see
:mod:`jobmanager.backends.elastic`): every worker restarts, from its checkpoint, into a
new rendezvous round of the new size. Its pods are deleted with the grace period and,
once they are gone, the new round's pods are created under the same Service with the
same names (rank 0's DNS name, the rendezvous endpoint, does not move). Waiting matters:
a pod bound by ``nodeName`` is admitted by the kubelet only on GPUs that no pod holds,
and a terminating pod holds its own. The Service records the round, so that reports
leave the replaced pods out and show the new ones pending meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from jobmanager.backends.base import (
    BackendNode,
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    JobReport,
    LaunchRefused,
)
from jobmanager.backends.k8s_logs import PodLog, PodLogCollector
from jobmanager.backends.k8s_manifests import (
    ANNOTATION_DEPLOYED,
    ANNOTATION_RESIZED_AT,
    ANNOTATION_ROUND,
    ANNOTATION_ROUND_DEPLOYED,
    ANNOTATION_STOP_REQUESTED,
    ANNOTATION_WORKERS,
    CONTAINER_NAME,
    KubernetesSettings,
    VolumeSettings,
    job_selector,
    pod_manifest,
    service_manifest,
    service_name,
)
from jobmanager.backends.k8s_nodes import NodeWatcher, backend_node
from jobmanager.backends.k8s_objects import metadata_of, name_of, node_name_of, uid_of
from jobmanager.backends.k8s_policies import JobPolicies
from jobmanager.backends.k8s_reports import (
    ReportContext,
    attempt_of,
    ending,
    job_id_of,
    job_report,
    marked,
    not_started,
    pod_ended,
    rank_of,
    resizing,
    round_of,
    service_round,
)

__all__ = ["KubernetesBackend", "KubernetesSettings", "NodeWatcher", "VolumeSettings"]

logger = logging.getLogger(__name__)

API_ERRORS = (ApiException, urllib3.exceptions.HTTPError)
# How often a resize looks whether the pods it deleted are gone, and how long past their
# grace period it waits for the kubelet before deleting them by force.
RESIZE_POLL_SECONDS = 0.2
RESIZE_KILL_MARGIN_SECONDS = 5.0


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
    resizes = True

    def __init__(
        self,
        settings: KubernetesSettings | None = None,
        api_client: client.ApiClient | None = None,
        watch_nodes: bool = True,
        log_dir: Path | str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``watch_nodes``: follow the nodes in a thread started on first use (in the
        process that uses the backend, after any fork); without it the node cache is
        listed once and then moves only by ``node_watcher.watch_once``. ``log_dir``: the
        log store that workers' logs are streamed into (none: logs stay in the cluster).
        ``clock``: the time, for the start timeout."""
        self.settings = settings or KubernetesSettings()
        self.api_client = api_client or api_client_from_config()
        self.core = client.CoreV1Api(self.api_client)
        self.policies = JobPolicies(self.api_client, self.settings)
        self.node_watcher = NodeWatcher(self.core, self.settings)
        self.watch_nodes = watch_nodes
        self.clock = clock
        self.logs = (
            PodLogCollector(self.core, self.namespace, CONTAINER_NAME, Path(log_dir), clock)
            if log_dir
            else None
        )

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
        if self.logs is not None:
            self.logs.stop()
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
            self.policies.ensure(launch.job_id)  # before any pod: none runs unprotected
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
            [pod for pod in pods if attempt_of(pod) != launch.attempt],
            [service for service in services if attempt_of(service) != launch.attempt],
        )
        name = service_name(launch.job_id, launch.attempt)
        return any(name_of(s) == name and marked(s, ANNOTATION_DEPLOYED) for s in services)

    def resize(self, launch: JobLaunch, grace_seconds: float) -> None:
        """Bring a deployed attempt to the launch's workers in a new rendezvous round (see
        the module docstring); an attempt not deployed in full, being stopped, or already
        at the launch's workers is left alone."""
        name = service_name(launch.job_id, launch.attempt)
        try:
            pods, services = self._job_objects(launch.job_id)
            service = next((s for s in services if name_of(s) == name), None)
            if service is None or not marked(service, ANNOTATION_DEPLOYED):
                return  # not deployed (yet), or another attempt: deploy and reconcile decide
            if marked(service, ANNOTATION_STOP_REQUESTED):
                return  # being stopped
            round_number = service_round(service)
            running = sorted(
                (rank_of(pod), node_name_of(pod))
                for pod in pods
                if attempt_of(pod) == launch.attempt and round_of(pod) == round_number
            )
            if not resizing(service) and running == [(w.rank, w.node) for w in launch.workers]:
                return  # already at this size
        except API_ERRORS as error:
            raise DeployError(
                f"resizing {launch.job_id} failed ({describe_api_error(error)})"
            ) from error
        new_round = round_number + 1
        try:
            manifests = [
                pod_manifest(launch, worker, self.settings, new_round) for worker in launch.workers
            ]
        except ValueError as error:
            raise LaunchRefused(f"Job {launch.job_id} cannot run here: {error}.") from error
        annotations = {
            ANNOTATION_ROUND: str(new_round),
            ANNOTATION_WORKERS: str(len(launch.workers)),
            ANNOTATION_RESIZED_AT: str(self.clock()),
        }
        try:
            self.core.patch_namespaced_service(
                name, self.namespace, {"metadata": {"annotations": annotations}}
            )
            self._delete_and_await(launch.job_id, pods, grace_seconds)
            for manifest in manifests:
                self._create(self.core.create_namespaced_pod, manifest)
        except API_ERRORS as error:
            raise DeployError(
                f"resizing {launch.job_id} to {len(launch.workers)} workers failed "
                f"({describe_api_error(error)}); the workers it has not started are "
                "reported failed"
            ) from error
        finally:  # from now on a missing pod of the round is a failed worker
            with contextlib.suppress(*API_ERRORS):
                self.core.patch_namespaced_service(
                    name,
                    self.namespace,
                    {"metadata": {"annotations": {ANNOTATION_ROUND_DEPLOYED: str(new_round)}}},
                )

    def _delete_and_await(
        self, job_id: str, pods: list[client.V1Pod], grace_seconds: float
    ) -> None:
        """Delete the pods with the grace period and return once they are gone; those the
        kubelet has not ended within the grace (and a margin) are deleted by force."""
        grace = max(0, math.ceil(grace_seconds))
        uids = {uid_of(pod) for pod in pods}
        for pod in pods:
            self._delete_pod(name_of(pod), grace)
        deadline = time.monotonic() + grace + RESIZE_KILL_MARGIN_SECONDS
        while True:
            job_ids = {job_id_of(pod) for pod in pods}
            left = [pod for job_id in job_ids for pod in self._pods(job_id) if uid_of(pod) in uids]
            if not left:
                return
            if time.monotonic() >= deadline:
                for pod in left:
                    self._delete_pod(name_of(pod), 0)
                return
            time.sleep(RESIZE_POLL_SECONDS)

    def stop(self, job_id: str, grace_seconds: float) -> None:
        """Delete the job's running and pending pods with the grace period (at once for a
        pod on a bad node, whose kubelet would never confirm); ended pods, and pods that
        will never start, stay until ``remove``, keeping their exit codes and reasons. The
        attempt's Service records the stop, so that the workers it ends are told from
        the one whose failure caused it."""
        grace = max(0, math.ceil(grace_seconds))
        pods, services = self._job_objects(job_id)
        stop_requested = {"metadata": {"annotations": {ANNOTATION_STOP_REQUESTED: "true"}}}
        for service in services:
            if not marked(service, ANNOTATION_STOP_REQUESTED):
                _ignore_not_found(
                    partial(
                        self.core.patch_namespaced_service,
                        name_of(service),
                        self.namespace,
                        stop_requested,
                    )
                )
        bad_nodes = self._node_cache().bad_nodes()
        context = self._context(bad_nodes)
        for pod in pods:
            if pod_ended(pod) or not_started(pod, context) is not None:
                continue
            node = node_name_of(pod)
            pod_grace = 0 if node is not None and node in bad_nodes else grace
            going = metadata_of(pod).deletion_grace_period_seconds
            if metadata_of(pod).deletion_timestamp is not None and (going or 0) <= pod_grace:
                continue  # already stopping, as fast as asked
            self._delete_pod(name_of(pod), pod_grace)

    def reports(self) -> dict[str, JobReport]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=job_selector()).items
        services = self.core.list_namespaced_service(
            self.namespace, label_selector=job_selector()
        ).items
        self._sweep_policies(pods, services)
        pods_by_job: dict[str, list[client.V1Pod]] = defaultdict(list)
        for pod in pods:
            pods_by_job[job_id_of(pod)].append(pod)
        for service in services:  # between a resize's deletions and its creations
            if resizing(service):
                pods_by_job.setdefault(job_id_of(service), [])
        if not pods_by_job:
            return {}
        cache = self._node_cache()
        bad_nodes = cache.bad_nodes()
        known = cache.names()
        for pod in pods:  # a pod bound to a node that is gone never runs
            node = node_name_of(pod)
            if node and node not in known:
                bad_nodes.setdefault(node, "node deleted")
        context = self._context(bad_nodes)
        if self.logs is not None:
            context = ReportContext(
                bad_nodes,
                context.now,
                context.start_timeout_seconds,
                self._collect(self.logs, pods, context),
            )
        services_by_name = {name_of(service): service for service in services}
        return {
            job_id: job_report(job_id, job_pods, services_by_name, context)
            for job_id, job_pods in pods_by_job.items()
        }

    def _sweep_policies(self, pods: list[client.V1Pod], services: list[client.V1Service]) -> None:
        """Every job with pods gets its policy, and policies left behind go (see
        :meth:`JobPolicies.sweep`); a failure is logged, never in the way of the reports."""
        try:
            self.policies.sweep(
                {job_id_of(pod) for pod in pods},
                {job_id_of(service) for service in services},
                self.clock(),
            )
        except API_ERRORS:
            logger.exception("sweeping the jobs' network policies")

    def _context(self, bad_nodes: dict[str, str]) -> ReportContext:
        return ReportContext(bad_nodes, self.clock(), self.settings.start_timeout_seconds)

    def _collect(
        self, logs: PodLogCollector, pods: list[client.V1Pod], context: ReportContext
    ) -> set[str]:
        """Follow running pods' logs; the pods (by uid) that ended, or will never start,
        whose log is complete in the store."""
        complete: set[str] = set()
        for pod in pods:
            worker = PodLog(
                job_id_of(pod),
                attempt_of(pod),
                rank_of(pod),
                name_of(pod),
                uid_of(pod),
                node_name_of(pod) or "",
            )
            phase = pod.status and pod.status.phase
            if phase == "Running":
                logs.follow(worker)
                continue
            ended, never = pod_ended(pod), not_started(pod, context) is not None
            if (ended or never) and logs.collect(worker, ending(pod, worker.attempt), ended):
                complete.add(uid_of(pod))
        return complete

    def remove(self, job_id: str) -> None:
        pods, services = self._job_objects(job_id)
        self._delete_all(pods, services)
        self.policies.delete(job_id)  # last: no pod of the job is left unprotected

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

    def _create(self, create: Callable[..., Any], manifest: dict[str, Any]) -> None:
        """Create an object; one already there (an interrupted deploy of this same
        attempt made it) is fine."""
        try:
            create(self.namespace, manifest)
        except ApiException as error:
            if error.status != 409:
                raise

    def _delete_pod(self, name: str, grace_seconds: int) -> None:
        _ignore_not_found(
            lambda: self.core.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=grace_seconds
            )
        )

    def _delete_all(
        self, pods: Iterable[client.V1Pod], services: Iterable[client.V1Service]
    ) -> None:
        for pod in pods:
            self._delete_pod(name_of(pod), 0)
        for service in services:
            _ignore_not_found(
                partial(self.core.delete_namespaced_service, name_of(service), self.namespace)
            )


def _ignore_not_found(call: Callable[[], object]) -> None:
    try:
        call()
    except ApiException as error:
        if error.status != 404:
            raise
