"""The Kubernetes backend built from settings (``TRAINYARD_K8S_*``), and the names of the
pods it runs."""

from __future__ import annotations

import shlex

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from jobmanager.backends.k8s_manifests import pod_name
from jobmanager.backends.kubernetes import KubernetesBackend, KubernetesSettings, VolumeSettings


def _volume(
    spec: str, mount: str, read_only: bool, name: str, sub_path: str
) -> VolumeSettings | None:
    if not spec:
        return None
    try:
        return VolumeSettings.parse(spec, mount, read_only, sub_path)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: {error}") from error


def _gateway_labels(items: list[str]) -> tuple[tuple[str, str], ...]:
    """``key=value`` items as label pairs; at least one, or every pod of the portal's
    namespace would be admitted to every job."""
    pairs = [item.partition("=") for item in items]
    if not pairs or any(not key or not sep or not value for key, sep, value in pairs):
        raise ImproperlyConfigured(
            "TRAINYARD_K8S_GATEWAY_LABELS: one or more key=value labels of the SSH "
            f"gateway's pods, not {','.join(items)!r}"
        )
    return tuple((key, value) for key, _, value in pairs)


def kubernetes_backend() -> KubernetesBackend:
    return KubernetesBackend(
        KubernetesSettings(
            namespace=settings.TRAINYARD_K8S_NAMESPACE,
            image_pull_secrets=tuple(settings.TRAINYARD_K8S_IMAGE_PULL_SECRETS),
            default_image=settings.TRAINYARD_K8S_DEFAULT_IMAGE,
            data_volume=_volume(
                settings.TRAINYARD_K8S_DATA_VOLUME,
                settings.TRAINYARD_K8S_DATA_MOUNT,
                True,
                "TRAINYARD_K8S_DATA_VOLUME",
                settings.TRAINYARD_K8S_DATA_SUBPATH,
            ),
            output_volume=_volume(
                settings.TRAINYARD_K8S_OUTPUT_VOLUME,
                settings.TRAINYARD_K8S_OUTPUT_MOUNT,
                False,
                "TRAINYARD_K8S_OUTPUT_VOLUME",
                settings.TRAINYARD_K8S_OUTPUT_SUBPATH,
            ),
            gpu_resource=settings.TRAINYARD_K8S_GPU_RESOURCE,
            gpu_type_labels=tuple(settings.TRAINYARD_K8S_GPU_TYPE_LABELS),
            switch_labels=tuple(settings.TRAINYARD_K8S_SWITCH_LABELS),
            rack_labels=tuple(settings.TRAINYARD_K8S_RACK_LABELS),
            init_command=tuple(shlex.split(settings.TRAINYARD_K8S_INIT_COMMAND)),
            grace_seconds=settings.TRAINYARD_STOP_GRACE_SECONDS,
            start_timeout_seconds=settings.TRAINYARD_K8S_START_TIMEOUT_SECONDS,
            bad_condition_types=tuple(settings.TRAINYARD_K8S_BAD_NODE_CONDITIONS),
            portal_namespace=settings.TRAINYARD_K8S_PORTAL_NAMESPACE,
            gateway_labels=_gateway_labels(settings.TRAINYARD_K8S_GATEWAY_LABELS),
            egress_open=settings.TRAINYARD_K8S_JOB_EGRESS,
        ),
        log_dir=settings.TRAINYARD_LOG_DIR,
    )


def attempt_pods(job_id: str, attempt: int, workers: int) -> list[str]:
    """The names of an attempt's worker pods, rank 0 first."""
    return [pod_name(job_id, attempt, rank) for rank in range(workers)]
