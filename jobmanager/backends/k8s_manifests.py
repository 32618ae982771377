"""What the Kubernetes backend asks the API server to create, as plain manifests.

One pod per worker, bound to the node the core chose; one headless Service per attempt
for worker discovery; one NetworkPolicy per job that admits only the job's own pods (and
the SSH gateway's, in the portal's namespace). Every name is a valid DNS-1123 name and
every label value a valid label value, whatever the VC or user is called. Nothing here
talks to a cluster.

Pods run as their owner: the owner's uid, gid and groups, never root, no privilege
escalation, every capability dropped, the runtime's default seccomp profile; the shared
volumes are mounted at a sub-path of the owner's (``<vc>/<user>``) or the VC's
(``<vc>/shared``), so that a pod sees no other tenant's tree.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jobmanager.backends.base import JobLaunch, RunAs, WorkerSpec
from jobmanager.backends.elastic import elastic_command, elastic_env, rendezvous_endpoint

LABEL_JOB = "trainyard.io/job"
LABEL_ATTEMPT = "trainyard.io/attempt"
LABEL_VC = "trainyard.io/vc"
LABEL_USER = "trainyard.io/user"
LABEL_RANK = "trainyard.io/rank"
LABEL_ROLE = "trainyard.io/role"
LABEL_ROUND = "trainyard.io/round"  # an elastic job's rendezvous round: one per resize
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "trainyard"
ROLE_WORKER = "worker"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # the API server sets it (1.22+)

ANNOTATION_JOB_ID = "trainyard.io/job-id"  # the job id as given, whatever its label became
ANNOTATION_WORKERS = "trainyard.io/workers"
ANNOTATION_DEPLOYED = "trainyard.io/deployed"  # on the Service, once every pod exists
ANNOTATION_STOP_REQUESTED = "trainyard.io/stop-requested"  # on the Service, once asked
# On the Service of a resized attempt: the round its pods are (or are being) brought to,
# when that began, and the round whose pods all exist.
ANNOTATION_ROUND = "trainyard.io/round"
ANNOTATION_RESIZED_AT = "trainyard.io/resized-at"
ANNOTATION_ROUND_DEPLOYED = "trainyard.io/round-deployed"
ANNOTATION_GPUS = "trainyard.io/gpus"
ANNOTATION_OWNER = "trainyard.io/owner"
ANNOTATION_VC = "trainyard.io/vc-name"
ANNOTATION_JOB_NAME = "trainyard.io/job-name"

CONTAINER_NAME = "worker"
SHELL = ("/bin/sh", "-c")

_DNS_LABEL_MAX = 63
_LABEL_VALUE_MAX = 63
_HASH_CHARS = 8
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class VolumeSettings:
    """Where a job's data or output lives: an NFS export, a host path or a PVC, mounted in
    every worker at ``mount_path``."""

    kind: str  # "nfs", "hostPath" or "pvc"
    mount_path: str
    server: str = ""  # nfs
    path: str = ""  # nfs export, or the path on the host
    claim_name: str = ""  # pvc
    read_only: bool = False
    # The part of the volume a job sees: "{vc}" and "{user}" (its owner's Unix account)
    # are filled in; "" mounts the whole volume.
    sub_path: str = ""

    def __post_init__(self) -> None:
        needs = {"nfs": ("server", "path"), "hostPath": ("path",), "pvc": ("claim_name",)}
        if self.kind not in needs:
            raise ValueError(f"volume kind {self.kind!r}: expected nfs, hostPath or pvc")
        missing = [name for name in needs[self.kind] if not getattr(self, name)]
        if missing or not self.mount_path.startswith("/"):
            raise ValueError(
                f"{self.kind} volume needs {', '.join(needs[self.kind])} and an absolute mount path"
            )

        if self.sub_path and (self.sub_path.startswith("/") or ".." in self.sub_path.split("/")):
            raise ValueError(f"sub-path {self.sub_path!r}: a relative path without '..'")

    @classmethod
    def parse(
        cls, spec: str, mount_path: str, read_only: bool = False, sub_path: str = ""
    ) -> VolumeSettings:
        """A volume from one setting: ``nfs://server/export``, ``hostpath:///mnt/data`` or
        ``pvc://claim-name``."""
        url = urlsplit(spec)
        if url.scheme == "nfs":
            return cls(
                "nfs", mount_path, url.netloc, url.path or "/",
                read_only=read_only, sub_path=sub_path,
            )  # fmt: skip
        if url.scheme == "hostpath":
            return cls(
                "hostPath", mount_path, path=url.path, read_only=read_only, sub_path=sub_path
            )
        if url.scheme == "pvc":
            return cls(
                "pvc", mount_path, claim_name=url.netloc, read_only=read_only, sub_path=sub_path
            )
        raise ValueError(f"{spec!r}: expected nfs://server/path, hostpath:///path or pvc://name")

    def sub_path_for(self, vc: str, user: str) -> str:
        """The sub-path a job of ``user`` in ``vc`` mounts. Raises ValueError when the
        names would make it leave its tree."""
        if not self.sub_path:
            return ""
        path = self.sub_path.format(vc=vc, user=user)
        parts = path.split("/")
        if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"sub-path {path!r} of {self.sub_path!r} is not confined")
        return path

    def volume_source(self) -> dict[str, Any]:
        if self.kind == "nfs":
            return {"nfs": {"server": self.server, "path": self.path}}
        if self.kind == "hostPath":
            return {"hostPath": {"path": self.path, "type": "Directory"}}
        return {"persistentVolumeClaim": {"claimName": self.claim_name}}


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """How the backend uses its cluster. Every field has a default that is safe."""

    namespace: str = "trainyard-jobs"  # apart from Trainyard's own pods
    image_pull_secrets: tuple[str, ...] = ()
    default_image: str = ""  # for jobs that name none
    data_volume: VolumeSettings | None = None
    output_volume: VolumeSettings | None = None
    gpu_resource: str = "nvidia.com/gpu"
    # The first of these node labels that a node has names its GPU type.
    gpu_type_labels: tuple[str, ...] = ("trainyard.io/gpu-type", "nvidia.com/gpu.product")
    # The first of these that a node has names its network switch, and its rack.
    switch_labels: tuple[str, ...] = ("trainyard.io/switch",)
    rack_labels: tuple[str, ...] = ("trainyard.io/rack",)
    # PID 1 of every worker: reaps zombies, forwards SIGTERM to the whole process group.
    init_command: tuple[str, ...] = ("/usr/bin/tini", "-g", "--")
    grace_seconds: int = 30
    # A worker whose pod does not run within this long (an image that cannot be pulled
    # once its back-off has had its tries, a pod no node takes) fails the attempt.
    start_timeout_seconds: int = 600
    master_port: int = 29500
    rendezvous_port: int = 29400  # an elastic job's c10d store, on rank 0 (torchrun's own)
    cluster_domain: str = "cluster.local"
    # Node conditions that, when True, mean the node cannot run jobs (node problem detector).
    bad_condition_types: tuple[str, ...] = ("GpuUnhealthy", "XidError")
    repair_label: str = "trainyard.io/repair-state"  # set by the repair manager
    in_service_value: str = "in_service"
    # The pods admitted to every job's pods besides the job's own: the SSH gateway (and
    # the endpoint proxy it serves), by the labels deploy/kubernetes/ssh-gateway.yaml
    # gives them, in the portal's namespace.
    portal_namespace: str = "trainyard"
    gateway_labels: tuple[tuple[str, str], ...] = (
        ("app.kubernetes.io/name", "trainyard"),
        ("app.kubernetes.io/component", "ssh-gateway"),
    )
    # Whether jobs may connect out (the internet, services of the cluster); off, a job's
    # pods reach only each other and the cluster's DNS (dns_namespace, dns_labels).
    egress_open: bool = True
    dns_namespace: str = "kube-system"
    dns_labels: tuple[tuple[str, str], ...] = (("k8s-app", "kube-dns"),)


# --- names ------------------------------------------------------------------------------


def _short_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:_HASH_CHARS]


def dns_label(value: str, max_length: int = _DNS_LABEL_MAX) -> str:
    """``value`` as a DNS-1123 label: unchanged when it already is one, else cleaned and
    suffixed with a hash of the original, so that two different values never collide."""
    if len(value) <= max_length and _DNS_LABEL.match(value):
        return value
    cleaned = _NOT_DNS.sub("-", value.lower()).strip("-")
    keep = max_length - _HASH_CHARS - 1
    return f"{cleaned[:keep].rstrip('-')}-{_short_hash(value)}".lstrip("-")


def label_value(value: str) -> str:
    """``value`` as a label value, by the same rule as :func:`dns_label`."""
    if _LABEL_VALUE.match(value):
        return value
    cleaned = _NOT_LABEL_VALUE.sub("-", value).strip("-_.")
    keep = _LABEL_VALUE_MAX - _HASH_CHARS - 1
    return f"{cleaned[:keep].rstrip('-_.')}-{_short_hash(value)}".lstrip("-")


def service_name(job_id: str, attempt: int) -> str:
    return dns_label(f"ty-{job_id}-{attempt}")


def pod_name(job_id: str, attempt: int, rank: int) -> str:
    return dns_label(f"ty-{job_id}-{attempt}-{rank}")


def job_policy_name(job_id: str) -> str:
    return dns_label(f"ty-{job_id}")


def job_selector(job_id: str | None = None) -> str:
    """The label selector of one job's objects, or of every job's."""
    return LABEL_JOB if job_id is None else f"{LABEL_JOB}={label_value(job_id)}"


def worker_address(launch: JobLaunch, rank: int, settings: KubernetesSettings) -> str:
    """A worker's DNS name, which its pod's hostname and subdomain give it."""
    service = service_name(launch.job_id, launch.attempt)
    return (
        f"{pod_name(launch.job_id, launch.attempt, rank)}.{service}.{settings.namespace}"
        f".svc.{settings.cluster_domain}"
    )


def master_address(launch: JobLaunch, settings: KubernetesSettings) -> str:
    """Rank 0's DNS name."""
    return worker_address(launch, 0, settings)


def _job_labels(launch: JobLaunch, settings: KubernetesSettings) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_JOB: label_value(launch.job_id),
        LABEL_ATTEMPT: str(launch.attempt),
        LABEL_VC: label_value(launch.vc),
        LABEL_USER: label_value(launch.owner),
    }


# --- manifests --------------------------------------------------------------------------


def worker_resources(worker: WorkerSpec, settings: KubernetesSettings) -> dict[str, str]:
    """Requests, equal to limits (Guaranteed QoS); GPUs only for workers that have some:
    the device plugin picks the devices, so the core's indices are only recorded."""
    resources = {"cpu": f"{worker.millicpus}m", "memory": f"{worker.memory}Mi"}
    if worker.gpus:
        resources[settings.gpu_resource] = str(len(worker.gpus))
    return resources


def worker_env(
    launch: JobLaunch, worker: WorkerSpec, settings: KubernetesSettings
) -> list[dict[str, str]]:
    data = settings.data_volume.mount_path if settings.data_volume else ""
    output = settings.output_volume.mount_path if settings.output_volume else ""
    trainyard = {
        "WORLD_SIZE": str(len(launch.workers)),
        "RANK": str(worker.rank),
        "LOCAL_RANK": "0",  # one worker per pod
        "MASTER_ADDR": master_address(launch, settings),
        "MASTER_PORT": str(settings.master_port),
        "TRAINYARD_JOB_ID": launch.job_id,
        "TRAINYARD_ATTEMPT": str(launch.attempt),
        "TRAINYARD_DATA_PATH": launch.data_path or data,
        "TRAINYARD_OUTPUT_PATH": launch.output_path or output,
    }
    if launch.elastic:
        trainyard |= elastic_env(launch, _rendezvous(launch, settings))
    merged = dict(launch.env) | trainyard  # the API refuses these names; never let them in
    return [{"name": name, "value": value} for name, value in merged.items()]


def pod_security_context(run_as: RunAs) -> dict[str, Any]:
    """The pod runs as its owner; files on volumes that support it get the owner's group."""
    context = {
        "runAsUser": run_as.uid,
        "runAsGroup": run_as.gid,
        "runAsNonRoot": True,
        "fsGroup": run_as.gid,
        "fsGroupChangePolicy": "OnRootMismatch",  # no recursive chown of a full volume
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    others = sorted(set(run_as.groups) - {run_as.gid})
    if others:
        context["supplementalGroups"] = others
    return context


CONTAINER_SECURITY_CONTEXT = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _rendezvous(launch: JobLaunch, settings: KubernetesSettings) -> str:
    return rendezvous_endpoint(master_address(launch, settings), settings.rendezvous_port)


def worker_command(
    launch: JobLaunch, worker: WorkerSpec, settings: KubernetesSettings, round_number: int
) -> str:
    """What the worker's shell runs: the job's command, or for an elastic job that command
    under torchrun's elastic agent in the attempt's rendezvous round ``round_number``
    (see :mod:`jobmanager.backends.elastic`), its address its pod's DNS name."""
    if not launch.elastic:
        return launch.command
    round_id = f"{launch.job_id}-{launch.attempt}-{round_number}"
    own = worker_address(launch, worker.rank, settings)
    return elastic_command(launch, worker.rank, _rendezvous(launch, settings), own, round_id)


def pod_manifest(
    launch: JobLaunch, worker: WorkerSpec, settings: KubernetesSettings, round_number: int = 0
) -> dict[str, Any]:
    """One worker's pod, of rendezvous round ``round_number`` (an elastic job's: one per
    resize). Raises ValueError for a launch without its owner's account (a pod never
    runs as root) or whose names would lead a volume's sub-path astray."""
    if launch.run_as is None:
        raise ValueError(f"job {launch.job_id}: its owner {launch.owner} has no Unix account")
    name = pod_name(launch.job_id, launch.attempt, worker.rank)
    resources = worker_resources(worker, settings)
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]  # NCCL, DataLoader
    mounts: list[dict[str, str | bool]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for volume_name, volume in (("data", settings.data_volume), ("output", settings.output_volume)):
        if volume is not None:
            volumes.append({"name": volume_name, **volume.volume_source()})
            mount: dict[str, str | bool] = {"name": volume_name, "mountPath": volume.mount_path}
            mount["readOnly"] = volume.read_only
            sub_path = volume.sub_path_for(launch.vc, launch.run_as.name)
            if sub_path:
                mount["subPath"] = sub_path
            mounts.append(mount)
    ports = [{"name": "master", "containerPort": settings.master_port}]
    if launch.elastic:
        ports.append({"name": "rendezvous", "containerPort": settings.rendezvous_port})
    command = worker_command(launch, worker, settings, round_number)
    container = {
        "name": CONTAINER_NAME,
        "image": launch.image or settings.default_image,
        "command": [*settings.init_command, *SHELL, command],
        "env": worker_env(launch, worker, settings),
        "resources": {"requests": resources, "limits": dict(resources)},
        "volumeMounts": mounts,
        "ports": ports,
        "securityContext": dict(CONTAINER_SECURITY_CONTEXT),
    }
    if launch.working_dir:
        container["workingDir"] = launch.working_dir
    spec: dict[str, Any] = {
        "nodeName": worker.node,  # placed by the core: no scheduler involved
        "restartPolicy": "Never",
        "hostname": name,
        "subdomain": service_name(launch.job_id, launch.attempt),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # tenants get no API credentials
        "terminationGracePeriodSeconds": settings.grace_seconds,
        "securityContext": pod_security_context(launch.run_as),
        "containers": [container],
        "volumes": volumes,
    }
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": secret} for secret in settings.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": _job_labels(launch, settings)
            | {
                LABEL_RANK: str(worker.rank),
                LABEL_ROLE: ROLE_WORKER,
                LABEL_ROUND: str(round_number),
            },
            "annotations": {
                ANNOTATION_JOB_ID: launch.job_id,
                ANNOTATION_WORKERS: str(len(launch.workers)),
                ANNOTATION_GPUS: ",".join(map(str, worker.gpus)),
                ANNOTATION_OWNER: launch.owner,
                ANNOTATION_VC: launch.vc,
                ANNOTATION_JOB_NAME: launch.name,
            },
        },
        "spec": spec,
    }


def service_manifest(launch: JobLaunch, settings: KubernetesSettings) -> dict[str, Any]:
    """A headless Service: DNS names for the workers, published before they are ready."""
    labels = _job_labels(launch, settings)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(launch.job_id, launch.attempt),
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_JOB_ID: launch.job_id,
                ANNOTATION_WORKERS: str(len(launch.workers)),
            },
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: labels[LABEL_JOB], LABEL_ATTEMPT: labels[LABEL_ATTEMPT]},
            "ports": [
                {
                    "name": "master",
                    "port": settings.master_port,
                    "targetPort": settings.master_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def job_policy_manifest(job_id: str, settings: KubernetesSettings) -> dict[str, Any]:
    """The job's pods accept traffic only from pods of the same job (any attempt: two are
    never up together) and from the SSH gateway's pods in the portal's namespace (see
    :mod:`jobmanager.backends.k8s_policies`); egress is open, or with ``egress_open``
    off, only to pods of the same job and to the cluster's DNS."""
    job = {LABEL_JOB: label_value(job_id)}
    gateway = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: settings.portal_namespace}},
        "podSelector": {"matchLabels": dict(settings.gateway_labels)},
    }
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": job},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": job}}, gateway]}],
    }
    if not settings.egress_open:
        dns = {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: settings.dns_namespace}},
            "podSelector": {"matchLabels": dict(settings.dns_labels)},
        }
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["egress"] = [
            {"to": [{"podSelector": {"matchLabels": job}}]},
            {
                "to": [dns],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": job_policy_name(job_id),
            "namespace": settings.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY} | job,
            "annotations": {ANNOTATION_JOB_ID: job_id},
        },
        "spec": spec,
    }


def job_manifests(launch: JobLaunch, settings: KubernetesSettings) -> list[dict[str, Any]]:
    """Everything one attempt needs, in the order it is created."""
    return [
        job_policy_manifest(launch.job_id, settings),
        service_manifest(launch, settings),
        *(pod_manifest(launch, worker, settings) for worker in launch.workers),
    ]
