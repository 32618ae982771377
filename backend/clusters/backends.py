"""The cluster backend this installation uses (``TRAINYARD_BACKEND``), one per process."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from backend.core.training_env import job_path
from jobmanager.backends import ClusterBackend

BACKENDS = ("local", "kubernetes", "slurm", "memory")


@dataclass(frozen=True)
class LocalSandbox:
    """The local backend's sandbox settings (TRAINYARD_LOCAL_SANDBOX*)."""

    mode: str
    paths: tuple[str, ...]
    pids_limit: int
    bridge: str
    subnet: str
    egress_nat: bool
    image_store: str
    image_pull: bool
    image_cache_keep: int
    gpu_driver: str

    @classmethod
    def from_settings(cls) -> LocalSandbox:
        return cls(
            settings.TRAINYARD_LOCAL_SANDBOX,
            # The training environment, on every job's PATH, wherever it is kept.
            (str(settings.TRAINYARD_TRAINING_ENV), *settings.TRAINYARD_LOCAL_SANDBOX_PATHS),
            settings.TRAINYARD_LOCAL_SANDBOX_PIDS_LIMIT,
            settings.TRAINYARD_LOCAL_SANDBOX_BRIDGE,
            settings.TRAINYARD_LOCAL_SANDBOX_SUBNET,
            settings.TRAINYARD_LOCAL_SANDBOX_EGRESS_NAT,
            settings.TRAINYARD_LOCAL_IMAGE_STORE,
            settings.TRAINYARD_LOCAL_IMAGE_PULL,
            settings.TRAINYARD_LOCAL_IMAGE_CACHE_KEEP,
            settings.TRAINYARD_LOCAL_GPU_DRIVER,
        )


@functools.cache
def _local_backend(
    state_dir: str,
    log_dir: str,
    nodes: str,
    cgroup_root: str,
    kill_after: float,
    notify_socket: str,
    spawner: str,
    sandbox: LocalSandbox,
    job_path: str,
) -> ClusterBackend:
    from backend.clusters.inventory import REGISTERED, registered_nodes
    from jobmanager.backends.local import LocalBackend

    try:
        return LocalBackend(
            state_dir,
            log_dir,
            nodes=registered_nodes if nodes == REGISTERED else (nodes or None),
            cgroup_root=cgroup_root or None,
            kill_after_seconds=kill_after,
            notify_socket=notify_socket or None,
            spawner_socket=spawner or None,
            sandbox=sandbox.mode,
            sandbox_readonly_paths=sandbox.paths,
            sandbox_pids_limit=sandbox.pids_limit,
            sandbox_bridge=sandbox.bridge,
            sandbox_subnet=sandbox.subnet,
            sandbox_egress_nat=sandbox.egress_nat,
            image_store_dir=sandbox.image_store or None,
            image_pull=sandbox.image_pull,
            image_cache_keep=sandbox.image_cache_keep,
            gpu_driver=sandbox.gpu_driver,
            job_path=job_path,
        )
    except ValueError as error:
        raise ImproperlyConfigured(
            f"TRAINYARD_LOCAL_NODES, _SANDBOX or _IMAGE_STORE: {error}"
        ) from error


@functools.cache
def _memory_backend(state_path: str, log_dir: str) -> ClusterBackend:
    from jobmanager.backends.memory import MemoryBackend

    return MemoryBackend(state_path=state_path, log_dir=log_dir)


@functools.cache
def _slurm_backend(
    state_dir: str, log_dir: str, conf: str, partition: str, stop_grace: float
) -> ClusterBackend:
    from jobmanager.backends.slurm import SlurmBackend

    return SlurmBackend(state_dir, log_dir, conf=conf, partition=partition, stop_grace=stop_grace)


@functools.cache
def _kubernetes_backend() -> ClusterBackend:
    from backend.clusters.kubernetes import kubernetes_backend

    return kubernetes_backend()


def inventory_is_registered() -> bool:
    """Whether the nodes jobs run on are the registered ones (the embedded default, the
    memory backend), rather than ones the backend discovers (Kubernetes, NVML) and would
    register again: only then may a node be removed through the API."""
    from backend.clusters.inventory import REGISTERED

    if settings.TRAINYARD_BACKEND == "local":
        return settings.TRAINYARD_LOCAL_NODES == REGISTERED
    return settings.TRAINYARD_BACKEND == "memory"


def get_backend() -> ClusterBackend:
    name = settings.TRAINYARD_BACKEND
    log_dir = str(settings.TRAINYARD_LOG_DIR)
    if name == "local":
        return _local_backend(
            str(settings.TRAINYARD_LOCAL_STATE_DIR),
            log_dir,
            settings.TRAINYARD_LOCAL_NODES,
            settings.TRAINYARD_LOCAL_CGROUP_ROOT,
            float(settings.TRAINYARD_LOCAL_KILL_AFTER_SECONDS),
            settings.TRAINYARD_LOCAL_NOTIFY_SOCKET,
            settings.TRAINYARD_LOCAL_SPAWNER_SOCKET,
            LocalSandbox.from_settings(),
            job_path(),
        )
    if name == "memory":
        return _memory_backend(str(settings.TRAINYARD_MEMORY_BACKEND_STATE), log_dir)
    if name == "kubernetes":
        return _kubernetes_backend()
    if name == "slurm":
        return _slurm_backend(
            str(settings.TRAINYARD_SLURM_STATE_DIR),
            log_dir,
            settings.TRAINYARD_SLURM_CONF,
            settings.TRAINYARD_SLURM_PARTITION,
            float(settings.TRAINYARD_STOP_GRACE_SECONDS),
        )
    raise ImproperlyConfigured(f"TRAINYARD_BACKEND={name!r}: choose one of {', '.join(BACKENDS)}.")
