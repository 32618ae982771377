"""Cluster backends: where jobs run. Chosen by configuration (``TRAINYARD_BACKEND``)."""

from jobmanager.backends.base import (
    BackendNode,
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    JobReport,
    LaunchRefused,
    RunAs,
    WorkerReport,
    WorkerSpec,
    WorkerState,
)

__all__ = [
    "BackendNode",
    "ClusterBackend",
    "DeployError",
    "Isolation",
    "JobLaunch",
    "JobReport",
    "LaunchRefused",
    "RunAs",
    "WorkerReport",
    "WorkerSpec",
    "WorkerState",
]
