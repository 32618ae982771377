"""A job's GPU utilisation over its attempts, read from Prometheus (the DCGM metric
``DCGM_FI_DEV_GPU_UTIL`` that dcgm-exporter and the repair manager's node agent serve,
labelled ``Hostname`` and ``gpu``) for exactly the GPUs each attempt was given.

On Kubernetes the device plugin, not Trainyard's scheduler, picks a pod's GPUs: the
series are those dcgm-exporter labels with the attempt's pods (it asks the kubelet's
pod-resources API which pod holds which GPU), so that the chart shows the GPUs the
workers really got."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from backend.jobs.models import Job, JobAttempt
from repairmanager.prometheus import PrometheusClient, PrometheusUnavailable

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
MAX_POINTS = 240  # per series: enough for a chart, small enough to answer at once
MIN_STEP_SECONDS = 15
MAX_ATTEMPTS = 5  # the latest ones


@dataclass
class GpuUtilisation:
    available: bool
    message: str = ""
    step_seconds: int = 0
    series: list[dict] = field(default_factory=list)
    mean: float | None = None


def _quoted(value: str) -> str:
    return re.sub(r'(["\\])', r"\\\1", value)


def attempt_selector(attempt: JobAttempt) -> str:
    """PromQL for the utilisation of exactly the attempt's GPUs."""
    if settings.TRAINYARD_BACKEND == "kubernetes":
        return _pods_selector(attempt)
    gpus_by_node: dict[str, set[int]] = {}
    for worker in attempt.placed_gpus:
        gpus_by_node.setdefault(worker.node, set()).update(worker.gpus)
    parts = [
        f'{GPU_UTIL}{{Hostname="{_quoted(node)}",gpu=~"{"|".join(map(str, sorted(gpus)))}"}}'
        for node, gpus in sorted(gpus_by_node.items())
        if gpus
    ]
    return " or ".join(parts)


def _pods_selector(attempt: JobAttempt) -> str:
    """The series of the GPUs held by the attempt's pods that have GPUs."""
    from backend.clusters.kubernetes import attempt_pods

    workers = attempt.placed_gpus
    pods = attempt_pods(attempt.job.job_id, attempt.number, len(workers))
    with_gpus = [pod for pod, worker in zip(pods, workers, strict=True) if worker.gpus]
    if not with_gpus:
        return ""
    namespace = settings.TRAINYARD_K8S_NAMESPACE
    return (
        f'{GPU_UTIL}{{{settings.TRAINYARD_K8S_METRICS_NAMESPACE_LABEL}="{_quoted(namespace)}",'
        f'{settings.TRAINYARD_K8S_METRICS_POD_LABEL}=~"{"|".join(with_gpus)}"}}'
    )


def job_gpu_utilisation(job: Job) -> GpuUtilisation:
    """Per GPU of each recent attempt, its utilisation (%) from the attempt's start to its
    end (or now), at most ``MAX_POINTS`` points each; ``available`` is false, with the
    reason, when there is nothing to show."""
    if not settings.TRAINYARD_PROMETHEUS_URL:
        return GpuUtilisation(False, "No metrics source is configured (TRAINYARD_PROMETHEUS_URL).")
    attempts = [
        attempt
        for attempt in job.attempts.order_by("-number")[:MAX_ATTEMPTS]
        if attempt_selector(attempt)
    ]
    if not attempts:
        return GpuUtilisation(False, "The job has not run on GPUs yet.")
    client = PrometheusClient(
        settings.TRAINYARD_PROMETHEUS_URL, timeout=settings.TRAINYARD_PROMETHEUS_TIMEOUT
    )
    now = timezone.now().timestamp()
    first = min(attempt.started_at.timestamp() for attempt in attempts)
    step = max(MIN_STEP_SECONDS, int((now - first) / MAX_POINTS) + 1)
    series: list[dict] = []
    try:
        for attempt in reversed(attempts):
            end = attempt.ended_at.timestamp() if attempt.ended_at else now
            # Points end at the attempt's end (or now), so that the latest value is shown
            # even for an attempt younger than one step.
            start = end - (end - attempt.started_at.timestamp()) // step * step
            for found in client.query_range(attempt_selector(attempt), start, end, step):
                series.append(
                    {
                        "attempt": attempt.number,
                        "node": found.labels.get("Hostname", ""),
                        "gpu": int(found.labels.get("gpu", -1)),
                        "points": [[round(at), value] for at, value in found.points],
                    }
                )
    except PrometheusUnavailable as error:
        return GpuUtilisation(False, f"GPU metrics cannot be read now: {error}")
    series.sort(key=lambda one: (one["attempt"], one["node"], one["gpu"]))
    values = [value for one in series for _, value in one["points"]]
    if not values:
        return GpuUtilisation(False, "Prometheus holds no GPU metrics for this job's GPUs.")
    return GpuUtilisation(True, "", step, series, round(sum(values) / len(values), 1))
