"""Gauges computed at scrape time from the database: the same answer whichever gunicorn
worker is scraped, and nothing to keep in step between processes."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta

from django.db import DatabaseError
from django.db.models import Count, F, Min, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from backend.clusters.models import GpuType, Node, RepairState
from backend.core.models import SchedulerFence
from backend.jobmanager.manager import LEASE_NAME
from backend.jobs.models import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    Job,
    JobStatus,
    placement_from_json,
)
from backend.repairs.manager import HELD_BACK
from backend.repairs.models import NodeFault
from backend.storage.models import RunStatus, Scan, StorageRoot
from backend.vcs.models import VirtualCluster

logger = logging.getLogger(__name__)


class TrainyardCollector(Collector):
    """Jobs, GPUs, queues, the scheduler, repairs and storage, as the database has them."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "trainyard_database_up", "Whether /metrics could read the database (1) or not (0)."
        )
        try:
            families = list(self._families())
        except DatabaseError:
            logger.warning("/metrics could not read the database", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self) -> Iterator[GaugeMetricFamily]:
        vcs = dict(VirtualCluster.objects.values_list("id", "name"))
        gpu_types = dict(GpuType.objects.values_list("id", "name"))
        yield _jobs(vcs, gpu_types)
        yield _gpus(vcs, gpu_types)
        yield _queue_oldest_wait(vcs)
        yield _queue_wait_thresholds()
        yield from _scheduler()
        yield from _repairs(gpu_types)
        yield from _storage()
        yield from _deadlines(vcs)


def _jobs(vcs: dict[int, str], gpu_types: dict[int, str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "trainyard_jobs",
        "Jobs not ended yet, by status, VC and GPU type (ended ones: trainyard_jobs_ended_total).",
        labels=["status", "vc", "gpu_type"],
    )
    # Not the ended jobs: the scrape stays as cheap as the queue is short, however many
    # finished jobs the database keeps.
    rows = (
        Job.objects.exclude(status__in=TERMINAL_STATUSES)
        .order_by()
        .values_list("status", "vc_id", "gpu_type_id")
        .annotate(count=Count("*"))
    )
    for status, vc_id, gpu_type_id, count in rows:
        family.add_metric([status, vcs.get(vc_id, ""), gpu_types.get(gpu_type_id, "")], count)
    return family


def _gpus(vcs: dict[int, str], gpu_types: dict[int, str]) -> GaugeMetricFamily:
    """Used (within quota) and borrowed GPUs per VC; free and out-of-service per type."""
    family = GaugeMetricFamily(
        "trainyard_gpus",
        "GPUs by state: used and borrowed (per VC), free and out_of_service (vc empty).",
        labels=["state", "gpu_type", "vc"],
    )
    # One pass over the jobs holding resources: their GPUs per VC, and per node as placed.
    held: dict[tuple[str, int, int], int] = defaultdict(int)
    held_on: dict[str, int] = defaultdict(int)
    # An elastic job's workers above min_workers are borrowed, as all of a borrowing job's.
    fields = ("vc", "gpu_type", "borrowing", "workers", "min_workers", "max_workers")
    active = (
        Job.objects.filter(status__in=ACTIVE_STATUSES)
        .order_by()
        .only(*fields, "gpus_per_worker", "placement")
    )
    for job in active.iterator(chunk_size=2000):
        borrowed = job.borrowed_workers * job.gpus_per_worker
        if borrowed < job.total_gpus or not borrowed:
            held["used", job.gpu_type_id, job.vc_id] += job.total_gpus - borrowed
        if borrowed:
            held["borrowed", job.gpu_type_id, job.vc_id] += borrowed
        for worker in placement_from_json(job.placement):
            held_on[worker.node] += len(worker.gpus)
    for (state, gpu_type_id, vc_id), gpus in sorted(held.items()):
        family.add_metric([state, gpu_types.get(gpu_type_id, ""), vcs.get(vc_id, "")], gpus)
    # Free: what the in-service nodes have beyond what the jobs placed on them hold (a job
    # still on a node being drained holds GPUs that are out of service, not free ones).
    free: dict[int, int] = defaultdict(int)
    out: dict[int, int] = defaultdict(int)
    nodes = Node.objects.order_by().values_list(
        "name", "gpu_type_id", "gpus", "schedulable", "ready", "repair_state"
    )
    for name, gpu_type_id, gpus, schedulable, ready, repair_state in nodes:
        if schedulable and ready and repair_state == RepairState.IN_SERVICE:
            free[gpu_type_id] += max(0, gpus - held_on[name])
        else:
            out[gpu_type_id] += gpus
    for gpu_type_id, name in gpu_types.items():
        family.add_metric(["free", name, ""], free[gpu_type_id])
        family.add_metric(["out_of_service", name, ""], out[gpu_type_id])
    return family


def _queue_wait_thresholds() -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "trainyard_queue_wait_threshold_seconds",
        "The VC's queue wait alert threshold (absent: no alert).",
        labels=["vc"],
    )
    thresholds = VirtualCluster.objects.filter(queue_wait_alert_minutes__isnull=False)
    for name, minutes in thresholds.values_list("name", "queue_wait_alert_minutes"):
        if minutes is not None:  # as the filter says: the hints allow None
            family.add_metric([name], minutes * 60)
    return family


def _queue_oldest_wait(vcs: dict[int, str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "trainyard_queue_oldest_wait_seconds",
        "How long the VC's longest-waiting queued job has waited (0: none waits).",
        labels=["vc"],
    )
    oldest = dict(
        Job.objects.filter(status=JobStatus.QUEUED)
        .order_by()
        .values_list("vc_id")
        .annotate(oldest=Min("queued_at"))
    )
    now = timezone.now()
    for vc_id, name in vcs.items():
        since = oldest.get(vc_id)
        family.add_metric([name], max(0.0, (now - since).total_seconds()) if since else 0.0)
    return family


def _scheduler() -> Iterator[GaugeMetricFamily]:
    family = GaugeMetricFamily(
        "trainyard_scheduler_last_pass_timestamp_seconds",
        "When the scheduler last applied a pass (unix time; absent before the first).",
    )
    applied = (
        SchedulerFence.objects.filter(name=LEASE_NAME).values_list("applied_at", flat=True).first()
    )
    if applied:
        family.add_metric([], applied.timestamp())
    yield family


def _repairs(gpu_types: dict[int, str]) -> Iterator[GaugeMetricFamily]:
    nodes = GaugeMetricFamily(
        "trainyard_nodes",
        "Nodes by repair state and GPU type.",
        labels=["repair_state", "gpu_type"],
    )
    counts = {
        (state, gpu_type_id): count
        for state, gpu_type_id, count in Node.objects.order_by()
        .values_list("repair_state", "gpu_type_id")
        .annotate(count=Count("*"))
    }
    for gpu_type_id, name in gpu_types.items():
        for state in RepairState.values:
            nodes.add_metric([state, name], counts.get((state, gpu_type_id), 0))
    yield nodes
    open_faults = NodeFault.objects.filter(cleared_at__isnull=True)
    held = GaugeMetricFamily(
        "trainyard_repair_held_back_faults",
        "Open faults the repair manager's safety valve holds back (their nodes stay in "
        "service: too many are out already).",
    )
    held.add_metric([], open_faults.filter(outcome__startswith=HELD_BACK).count())
    yield held
    blind = GaugeMetricFamily(
        "trainyard_repair_blind",
        "Whether the repair manager cannot evaluate its rules now (Prometheus unavailable).",
    )
    blind.add_metric([], int(open_faults.filter(node__isnull=True).exists()))
    yield blind


def _storage() -> Iterator[GaugeMetricFamily]:
    used = GaugeMetricFamily(
        "trainyard_storage_used_bytes", "Bytes a root held at its last scan.", labels=["root"]
    )
    scanned = GaugeMetricFamily(
        "trainyard_storage_scan_timestamp_seconds",
        "When a root's last scan finished (unix time).",
        labels=["root"],
    )
    threshold = GaugeMetricFamily(
        "trainyard_storage_alert_threshold_bytes",
        "The usage over which the root's owners are alerted.",
        labels=["root"],
    )
    for root in StorageRoot.objects.order_by("name"):
        last = (
            Scan.objects.filter(root=root, status=RunStatus.DONE)
            .order_by("-finished_at")
            .values_list("bytes_seen", "finished_at")
            .first()
        )
        if last:
            bytes_seen, finished_at = last
            used.add_metric([root.name], bytes_seen)
            if finished_at is not None:  # a scan that is done has finished
                scanned.add_metric([root.name], finished_at.timestamp())
        if root.alert_threshold_bytes:
            threshold.add_metric([root.name], root.alert_threshold_bytes)
    yield used
    yield scanned
    yield threshold


DEADLINE_WINDOW_DAYS = 7  # as GET /api/v1/vcs/<vc>/deadlines/ by default


def _deadlines(vcs: dict[int, str]) -> Iterator[GaugeMetricFamily]:
    """Each VC's jobs with a deadline that ended in the window, met or missed, and the
    share met (the VC's page and GET /vcs/<vc>/deadlines/ show the same)."""
    ended = GaugeMetricFamily(
        "trainyard_vc_deadline_jobs",
        f"Jobs with a deadline that ended in the last {DEADLINE_WINDOW_DAYS} days, by "
        "outcome (met: finished by it; missed), per VC.",
        labels=["vc", "outcome"],
    )
    rate = GaugeMetricFamily(
        "trainyard_vc_deadlines_met_ratio",
        f"Share of a VC's jobs with a deadline, ended in the last {DEADLINE_WINDOW_DAYS} "
        "days, that finished by it (no sample: none ended).",
        labels=["vc"],
    )
    since = timezone.now() - timedelta(days=DEADLINE_WINDOW_DAYS)
    met = Q(status=JobStatus.FINISHED, finished_at__lte=F("deadline"))
    rows = (
        Job.objects.filter(
            deadline__isnull=False, status__in=TERMINAL_STATUSES, finished_at__gte=since
        )
        .order_by()
        .values_list("vc_id")
        .annotate(count=Count("*"), met=Count("pk", filter=met))
    )
    for vc_id, count, met_count in rows:
        name = vcs.get(vc_id, "")
        ended.add_metric([name, "met"], met_count)
        ended.add_metric([name, "missed"], count - met_count)
        rate.add_metric([name], met_count / count)
    yield ended
    yield rate
