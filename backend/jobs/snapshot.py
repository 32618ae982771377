"""What the scheduler sees: the nodes, running and queued jobs and VCs as one snapshot, read
from the database (by a scheduling pass, and by admission, forecasts, insight and capacity,
which ask what a pass would decide)."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from functools import lru_cache

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from backend.clusters.models import Node, RepairState
from backend.core.quantities import millicpus
from backend.jobs.estimates import learned_run_times
from backend.jobs.history import Attained, attained_service, decayed_usage
from backend.jobs.models import (
    ACTIVE_STATUSES,
    Admission,
    Job,
    JobStatus,
    JobType,
    placement_from_json,
)
from backend.vcs.models import Quota, VirtualCluster
from jobmanager.core import (
    NodeState,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    VcState,
)
from jobmanager.core.deadlines import rate
from jobmanager.core.estimates import RunTimeEstimator
from jobmanager.core.placement import ClusterState
from jobmanager.core.snapshot import Elastic, JobShape, Policy

RELEASING_STATUSES = (JobStatus.PAUSING, JobStatus.KILLING)


def epoch(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else 0.0


# What the scheduler reads of each running or queued job.
JOB_COLUMNS = (
    "job_id", "vc__name", "vc__max_wall_time", "gpu_type__name", "workers",
    "gpus_per_worker", "cpus_per_worker", "memory_per_worker", "priority", "preemptible",
    "type", "status", "borrowing", "placement", "started_at", "updated_at", "queued_at",
    "max_wall_time", "node_selector", "reserved_placement", "owner__username", "deadline",
    "whole_nodes", "same_switch", "vc__whole_nodes_for_distributed", "min_workers",
    "max_workers", "resized_at", "admission", "throughput", "work",
)  # fmt: skip


# What it reads of each queued job: no placement or run times (a queued job has none), so
# that ten thousand of them cost few JSON and datetime conversions.
QUEUED_COLUMNS = (
    "job_id", "vc__name", "vc__max_wall_time", "gpu_type__name", "workers",
    "gpus_per_worker", "cpus_per_worker", "memory_per_worker", "priority", "preemptible",
    "type", "queued_at", "max_wall_time", "node_selector", "reserved_placement",
    "insight_message", "owner__username", "deadline", "pk", "whole_nodes", "same_switch",
    "vc__whole_nodes_for_distributed", "min_workers", "max_workers", "admission",
    "throughput", "work",
)  # fmt: skip


def load_nodes() -> tuple[NodeState, ...]:
    """Every node as the scheduler sees it: schedulable only when it is not cordoned, is
    in service and the cluster backend reports it ready."""
    return tuple(
        NodeState(
            name=row["name"],
            gpu_type=row["gpu_type__name"],
            capacity=Resources(row["gpus"], millicpus(row["cpus"]), row["memory"]),
            labels=tuple(sorted((str(k), str(v)) for k, v in row["labels"].items())),
            schedulable=row["schedulable"]
            and row["ready"]
            and row["repair_state"] == RepairState.IN_SERVICE,
            dedicated_to=row["dedicated_vc__name"] or "",
            switch=row["switch"],
        )
        for row in Node.objects.order_by().values(
            "name", "gpu_type__name", "gpus", "cpus", "memory", "labels", "schedulable",
            "repair_state", "ready", "dedicated_vc__name", "switch",
        )
    )  # fmt: skip


def load_running(
    estimates: RunTimeEstimator | None = None,
    attained: dict[str, Attained] | None = None,
    elastic: bool = False,
    now: float | None = None,
) -> tuple[RunningJob, ...]:
    """The jobs holding resources (running, and releasing them while they stop); with
    ``attained``, each with what it ran before its current attempt; with ``elastic``, each
    elastic one with its range of sizes, its curve and its work left at ``now`` (else it
    keeps its size)."""
    rows = Job.objects.filter(status__in=ACTIVE_STATUSES).order_by().values(*JOB_COLUMNS)
    running = (_running_job(row, estimates, elastic, now) for row in rows)
    if attained is None:
        return tuple(running)
    return tuple(
        replace(job, attained=attained[job.id].gpu_seconds) if job.id in attained else job
        for job in running
    )


def load_cluster_state() -> ClusterState:
    """What is free on each node exactly as a scheduling pass starts from it (what the
    dashboard shows as capacity)."""
    return ClusterState.of(load_nodes(), load_running())


def _hours(hours: int | None) -> float | None:
    return None if hours is None else hours * 3600.0


def load_snapshot(
    now: datetime | None = None,
    insights: dict[str, tuple[int, str]] | None = None,
    elastic: bool = False,
) -> Snapshot:
    """Nodes, VCs with quotas, jobs holding resources and jobs ready to start; with
    ``insights``, each ready job's primary key and current insight message are put there
    by job id. With ``elastic`` (a backend that resizes), elastic jobs carry their range
    of sizes; without, every job runs at its ``workers``."""
    now = now or timezone.now()
    nodes = load_nodes()
    quotas: dict[int, dict[str, Resources]] = defaultdict(dict)
    for row in Quota.objects.order_by().values("vc_id", "gpu_type__name", "gpus", "cpus", "memory"):
        quotas[row["vc_id"]][row["gpu_type__name"]] = Resources(
            row["gpus"], millicpus(row["cpus"]), row["memory"]
        )
    vcs = tuple(
        VcState(
            name=row["name"],
            quota=quotas[row["id"]],
            policy=Policy(row["policy"]),
            max_interactive_gpus=row["max_interactive_gpus"],
            lends_dedicated=row["lends_dedicated_nodes"],
            wait_limit=_hours(row["wait_limit_hours"]),
        )
        for row in VirtualCluster.objects.order_by().values(
            "id",
            "name",
            "policy",
            "max_interactive_gpus",
            "lends_dedicated_nodes",
            "wait_limit_hours",
        )
    )
    estimates = learned_run_times()
    attained = attained_service()
    running = load_running(estimates, attained, elastic, now.timestamp())
    ready = Job.objects.filter(status=JobStatus.QUEUED).filter(
        Q(not_before__isnull=True) | Q(not_before__lte=now)
    )
    rows = list(ready.order_by().values(*QUEUED_COLUMNS))
    if insights is not None:
        insights.update((row["job_id"], (row["pk"], row["insight_message"])) for row in rows)
    queued = tuple(queued_job(row, estimates, attained.get(row["job_id"]), elastic) for row in rows)
    return Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        vcs=vcs,
        running=running,
        queued=queued,
        starvation_seconds=float(settings.TRAINYARD_RF_STARVATION_SECONDS),
        las_starvation_seconds=float(settings.TRAINYARD_LAS_STARVATION_SECONDS),
        usage=decayed_usage(now),
        las_wait_limit=float(settings.TRAINYARD_LAS_WAIT_LIMIT_SECONDS) or None,
    )


def _shape(row: dict) -> JobShape:
    return _job_shape(
        row["gpu_type__name"],
        row["workers"],
        row["gpus_per_worker"],
        row["cpus_per_worker"],
        row["memory_per_worker"],
        tuple(sorted((row["node_selector"] or {}).items())),
        # Its own flag, or its VC's setting for every distributed job.
        row["whole_nodes"] or row["vc__whole_nodes_for_distributed"],
        row["same_switch"],
    )


@lru_cache(maxsize=4096)
def _job_shape(
    gpu_type: str,
    workers: int,
    gpus: int,
    cpus: Decimal,
    memory: int,
    node_selector: tuple[tuple[str, str], ...],
    whole_nodes: bool = False,
    same_switch: bool = False,
) -> JobShape:
    """One shape object for all the jobs of a shape (ten thousand jobs have a handful):
    made once, not once a row, and compared by identity first wherever a pass looks it up."""
    per_worker = Resources(gpus, millicpus(cpus), memory)
    return JobShape(
        gpu_type,
        workers,
        per_worker,
        node_selector,
        whole_nodes=whole_nodes,
        same_switch=same_switch,
    )


def _wall_time(row: dict) -> int:
    return min(row["max_wall_time"], row["vc__max_wall_time"])


def _expected_run(row: dict, estimates: RunTimeEstimator | None) -> float | None:
    """How long the job is expected to run: its user's similar jobs, within its wall time."""
    wall_time = float(_wall_time(row))
    if estimates is None:
        return wall_time
    gpus = row["workers"] * row["gpus_per_worker"]
    return estimates.estimate(row["vc__name"], row["owner__username"] or "", gpus, wall_time)


def _due(row: dict) -> float | None:
    """The deadline its owner set (``Job.deadline``), if any, as the core's ``due``; none
    for a job admitted best-effort (it cannot meet it: its deadline is not favoured)."""
    if row.get("deadline") is None or row.get("admission") == Admission.BEST_EFFORT:
        return None
    return epoch(row["deadline"])


def _elastic(row: dict, elastic: bool, work_left: float | None = None) -> Elastic | None:
    """The job's range of sizes, when it has one and the backend resizes, with its
    throughput curve (declared or learned at submit: backend/jobs/throughput.py) and the
    work it has left (``work_left``; its whole work when not given), which the core needs
    for its minimum satisfactory share and for the growth that shortens jobs most."""
    if not elastic or row["min_workers"] >= row["max_workers"]:
        return None
    interval = float(settings.TRAINYARD_ELASTIC_MIN_INTERVAL_SECONDS)
    curve = tuple(float(value) for value in row["throughput"] or ())
    work = row["work"] if curve and row["work"] is not None else None
    if work is not None and work_left is not None:
        work = work_left
    return Elastic(row["min_workers"], row["max_workers"], interval, throughput=curve, work=work)


def _work_left(row: dict, now: float) -> float | None:
    """A running job's work left: its work less what its current size has done, at its
    curve's rate, since it last started or was resized. What it did before its last
    resize is not known here (no progress is reported), so it counts as not done: the
    estimate errs towards a larger share rather than a smaller one."""
    curve, work = row["throughput"] or (), row["work"]
    if not curve or work is None:
        return None
    since = row["resized_at"] or row["started_at"] or row["updated_at"]
    done = float(rate(curve, row["workers"])) * max(0.0, now - epoch(since))
    return max(0.0, float(work) - done)


def _running_job(
    row: dict,
    estimates: RunTimeEstimator | None = None,
    elastic: bool = False,
    now: float | None = None,
) -> RunningJob:
    started = row["started_at"] or row["updated_at"]
    now = time.time() if now is None else now
    expected = _expected_run(row, estimates)
    return RunningJob(
        id=row["job_id"],
        vc=row["vc__name"],
        shape=_shape(row),
        placement=placement_from_json(row["placement"]),
        started_at=epoch(started),
        priority=row["priority"],
        preemptible=row["preemptible"],
        borrowing=row["borrowing"],
        interactive=row["type"] == JobType.INTERACTIVE,
        releasing=row["status"] in RELEASING_STATUSES,
        deadline=epoch(started) + _wall_time(row),
        queued_at=epoch(row["queued_at"]),
        user=row["owner__username"] or "",
        expected_end=None if expected is None else epoch(started) + expected,
        due=_due(row),
        elastic=_elastic(row, elastic, _work_left(row, now)),
        resized_at=epoch(row["resized_at"]) if row["resized_at"] is not None else None,
    )


def queued_job(
    row: dict,
    estimates: RunTimeEstimator | None = None,
    attained: Attained | None = None,
    elastic: bool = False,
) -> QueuedJob:
    """The scheduler's view of a waiting job, from a row of ``QUEUED_COLUMNS``; given what
    it ran before (``attained``), waiting since its last attempt ended."""
    return QueuedJob(
        id=row["job_id"],
        vc=row["vc__name"],
        shape=_shape(row),
        queued_at=epoch(row["queued_at"]),
        priority=row["priority"],
        preemptible=row["preemptible"],
        interactive=row["type"] == JobType.INTERACTIVE,
        max_wall_time=float(_wall_time(row)),
        reserved=placement_from_json(row["reserved_placement"]),
        user=row["owner__username"] or "",
        expected_duration=_expected_run(row, estimates),
        due=_due(row),
        attained=0.0 if attained is None else attained.gpu_seconds,
        waiting_since=None if attained is None else epoch(attained.last_ended),
        elastic=_elastic(row, elastic),
    )
