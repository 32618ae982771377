"""What a user sees before and while a job waits: the VC's queue in the order the
scheduler takes it, whether a job not yet submitted could start now, and how to reach a
running job."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from backend.jobs.admission import request_as_queued
from backend.jobs.forecast import forecast
from backend.jobs.job_request import JobRequest
from backend.jobs.models import Job, JobStatus
from backend.jobs.snapshot import JOB_COLUMNS, load_snapshot, queued_job
from backend.jobs.submission import needs_approval
from backend.vcs.models import VirtualCluster
from jobmanager.core import schedule
from jobmanager.core.scheduler import queue_order

PREVIEW_ID = "(preview)"  # no real job id has parentheses


def vc_queue(vc: VirtualCluster) -> list[dict[str, object]]:
    """The VC's waiting jobs, in the order its scheduler considers them (priority, then
    submission time, which preempted jobs keep, then the largest gang)."""
    rows = list(
        Job.objects.filter(vc=vc, status=JobStatus.QUEUED)
        .order_by()
        .values(*JOB_COLUMNS, "name", "owner__username", "status", "status_message",
                "insight_message", "submitted_at", "estimated_start_at", "not_before")
    )  # fmt: skip
    rows.sort(key=lambda row: queue_order(queued_job(row)))
    return [
        {
            "position": position,
            "job_id": row["job_id"],
            "name": row["name"],
            "owner": row["owner__username"],
            "gpu_type": row["gpu_type__name"],
            "workers": row["workers"],
            "gpus_per_worker": row["gpus_per_worker"],
            "priority": row["priority"],
            "preemptible": row["preemptible"],
            "status": row["status"],
            "status_message": row["status_message"],
            "insight_message": row["insight_message"],
            "submitted_at": row["submitted_at"],
            "not_before": row["not_before"],
            "estimated_start_at": row["estimated_start_at"],
        }
        for position, row in enumerate(rows, start=1)
    ]


@dataclass(frozen=True)
class StartPreview:
    can_start_now: bool
    reason: str | None
    estimated_start_at: datetime | None


def preview_start(request: JobRequest, user_id: int) -> StartPreview:
    """Whether the job, submitted now, would start on the next scheduling pass, and if not
    why and when it is likely to. Nothing is stored."""
    approval = needs_approval(request, user_id)
    if approval:
        return StartPreview(False, approval, None)
    now = timezone.now()
    candidate = replace(request_as_queued(request, PREVIEW_ID, now), due=None, elastic=None)
    snapshot = load_snapshot(now)
    snapshot = replace(snapshot, queued=(*snapshot.queued, candidate))
    decisions = schedule(snapshot)
    start = next((start for start in decisions.starts if start.job_id == PREVIEW_ID), None)
    if start is not None:
        reason = (
            "Starts as preemptible work, borrowing idle GPUs beyond the VC's quota."
            if start.borrowing
            else None
        )
        return StartPreview(True, reason, None)
    victims = [p for p in decisions.preemptions if p.for_job == PREVIEW_ID]
    if victims:
        reason = (
            f"Starts once {len(victims)} job(s) borrowing the VC's quota are preempted, "
            "in about the time they take to stop."
        )
        return StartPreview(False, reason, None)
    wait = next((wait.reason for wait in decisions.waits if wait.job_id == PREVIEW_ID), None)
    when = forecast(snapshot).start_of(PREVIEW_ID)
    return StartPreview(False, wait or "It would wait in the queue.", when)


def job_endpoints(job: Job, base_url: str = "/") -> dict:
    """How the owner reaches a running job through the SSH gateway (an SSH command line,
    a ``~/.ssh/config`` block, a VS Code Remote-SSH link, the gateway's host key) and, for
    each port the job exposes, its URL under ``base_url`` (empty while the job is not
    running)."""
    if job.status != JobStatus.RUNNING:
        return {}
    from backend.accounts.host_key import host_key_fingerprint
    from backend.clusters.backends import get_backend

    gateway = settings.TRAINYARD_SSH_GATEWAY
    port = settings.TRAINYARD_SSH_PORT
    login = f"{job.owner.username}+{job.job_id}"
    port_option = f" -p {port}" if port != 22 else ""
    host = f"{gateway}:{port}" if port != 22 else gateway
    # VS Code opens where the job's command runs (its own directory unless it names one).
    folder = job.working_dir or get_backend().default_working_dir(job.job_id) or "/"
    alias = f"trainyard-{job.job_id}"
    base_url = settings.TRAINYARD_ENDPOINTS_URL or base_url
    endpoints = {
        "ssh": f"ssh{port_option} {login}@{gateway}",
        "ssh_config": f"Host {alias}\n  HostName {gateway}\n  Port {port}\n  User {login}\n",
        "vscode": f"vscode://vscode-remote/ssh-remote+{login}@{host}{folder}",
        "host_key_fingerprint": host_key_fingerprint(),
        "ports": [
            {
                "name": exposed["name"],
                "port": exposed["port"],
                "url": f"{base_url.rstrip('/')}/endpoints/{job.job_id}/{exposed['name']}/",
            }
            for exposed in job.ports or []
        ],
    }
    return endpoints
