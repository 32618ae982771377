"""One NetworkPolicy per job: its pods admit ingress only from pods of the same job and
from the portal's SSH gateway (which serves the endpoint proxy too).

Two jobs of one VC are two tenants, so the policy selects by the job's label, which only
that job's pods carry (the portal alone creates pods in the jobs' namespace; tenants get
no API credentials). The gateway's pods are selected by their labels in the portal's
namespace (``namespaceSelector`` on ``kubernetes.io/metadata.name``, which the API server
sets on every namespace, with ``podSelector``), as ``deploy/kubernetes/ssh-gateway.yaml``
labels them. Egress is open by default (registries, package mirrors, data); with
``egress_open`` off the policy limits it to the job's own pods and the cluster's DNS.

Policies add up, so a wider one would undo this: the per-VC policies that earlier
versions made (``ty-vc-<vc>``, which admitted every pod of the VC) are deleted by the
sweep of every ``reports()`` pass, once every job with pods has its own policy.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jobmanager.backends.k8s_manifests import (
    ANNOTATION_JOB_ID,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_VC,
    MANAGED_BY,
    KubernetesSettings,
    job_policy_manifest,
    job_policy_name,
)
from jobmanager.backends.k8s_objects import annotations_of, labels_of, metadata_of, name_of

_LEGACY_PREFIX = "ty-vc-"  # the per-VC policies of earlier versions


class JobPolicies:
    """Creates, replaces and deletes the jobs' policies in the jobs' namespace."""

    def __init__(self, api_client: client.ApiClient, settings: KubernetesSettings) -> None:
        self.api_client = api_client
        self.networking = client.NetworkingV1Api(api_client)
        self.settings = settings

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def ensure(self, job_id: str) -> None:
        """Create the job's policy, or bring one that differs up to date (replaced whole: a
        merge could keep a selector that widens what it admits). Idempotent."""
        manifest = job_policy_manifest(job_id, self.settings)
        name = manifest["metadata"]["name"]
        try:
            current = self.networking.read_namespaced_network_policy(name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            try:
                self.networking.create_namespaced_network_policy(
                    self.namespace, client.V1NetworkPolicy.model_validate(manifest)
                )
            except ApiException as created:
                if created.status != 409:  # made meanwhile by an interrupted deploy
                    raise
            return
        self._update(current, manifest)

    def _update(self, current: client.V1NetworkPolicy, manifest: dict[str, Any]) -> None:
        """Replace ``current`` by ``manifest`` when their specs differ."""
        if self.api_client.sanitize_for_serialization(current.spec) == manifest["spec"]:
            return
        manifest["metadata"]["resourceVersion"] = metadata_of(current).resource_version
        # The same conversion of the manifest the client's argument check makes.
        policy = client.V1NetworkPolicy.model_validate(manifest)
        self.networking.replace_namespaced_network_policy(name_of(current), self.namespace, policy)

    def delete(self, job_id: str) -> None:
        """Delete the job's policy; one already gone is fine."""
        self._delete(job_policy_name(job_id))

    def sweep(self, jobs_with_pods: set[str], jobs_with_services: set[str], now: float) -> None:
        """Give every job with pods its policy as the settings now say (jobs deployed by an
        earlier version, or before the settings changed), then delete the per-VC policies
        of earlier versions, and the policies of jobs with no pod and no Service left that
        are older than the start timeout (a deploy makes its objects within seconds of its
        policy)."""
        policies = self.networking.list_namespaced_network_policy(
            self.namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        ).items
        by_job = {
            annotations_of(policy).get(ANNOTATION_JOB_ID, ""): policy
            for policy in policies
            if LABEL_JOB in labels_of(policy)
        }
        for job_id in sorted(jobs_with_pods):
            if job_id in by_job:
                self._update(by_job[job_id], job_policy_manifest(job_id, self.settings))
            else:
                self.ensure(job_id)
        for policy in policies:
            labels = labels_of(policy)
            legacy = name_of(policy).startswith(_LEGACY_PREFIX) and LABEL_VC in labels
            if legacy and LABEL_JOB not in labels:
                self._delete(name_of(policy))
        oldest = now - self.settings.start_timeout_seconds
        for job_id, policy in by_job.items():
            created = metadata_of(policy).creation_timestamp
            if job_id in jobs_with_pods | jobs_with_services or created is None:
                continue
            if created.timestamp() < oldest:
                self._delete(name_of(policy))

    def _delete(self, name: str) -> None:
        try:
            self.networking.delete_namespaced_network_policy(name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
