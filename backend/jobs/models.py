"""Training jobs, each run of them (attempts), and every change of their status (events)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from backend.clusters.models import GpuType
from backend.core.quantities import millicpus
from backend.jobs.elastic import resize_warning
from backend.vcs.models import Membership, Role, VirtualCluster
from jobmanager.core import WorkerPlacement

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

    from backend.core.querysets import Action
    from backend.jobs.job_request import JobRequest

JOB_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32: no i, l, o, u
JOB_ID_LENGTH = 10


def new_job_id() -> str:
    # 32 letters: each random byte's low five bits pick one, uniformly.
    return "".join(JOB_ID_ALPHABET[byte & 31] for byte in secrets.token_bytes(JOB_ID_LENGTH))


class JobType(models.TextChoices):
    BATCH = "batch"
    DISTRIBUTED = "distributed"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"


class JobStatus(models.TextChoices):
    UNAPPROVED = "unapproved"
    QUEUED = "queued"
    SCHEDULING = "scheduling"
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"
    KILLING = "killing"
    KILLED = "killed"
    FINISHED = "finished"
    FAILED = "failed"
    TIMEOUT = "timeout"


# Jobs that hold cluster resources, those waiting for them, and those that are over.
ACTIVE_STATUSES = (JobStatus.SCHEDULING, JobStatus.RUNNING, JobStatus.PAUSING, JobStatus.KILLING)
PENDING_STATUSES = (JobStatus.UNAPPROVED, JobStatus.QUEUED)
TERMINAL_STATUSES = (JobStatus.KILLED, JobStatus.FINISHED, JobStatus.FAILED, JobStatus.TIMEOUT)


# The placement codec: the one reader and writer of Job.placement (and
# reserved_placement), one entry per worker in rank order, {"rank", "node", "gpus": [device
# indices], "cpus", "memory"}, and of JobAttempt.gpus, {"node", "gpus": [device indices]}
# per worker. Every writer stores the GPUs as a list of indices, never as a count.


def placement_from_json(placement: list[dict] | None) -> tuple[WorkerPlacement, ...]:
    """A stored placement (one entry per worker, in rank order), typed."""
    return tuple(
        WorkerPlacement(
            node=worker["node"],
            gpus=tuple(worker.get("gpus") or ()),
            millicpus=millicpus(worker.get("cpus", 0)),
            memory=int(worker.get("memory", 0)),
        )
        for worker in placement or []
    )


def placement_to_json(placement: Iterable[WorkerPlacement]) -> list[dict]:
    """A placement as stored (the inverse of ``placement_from_json``)."""
    return [
        {
            "rank": rank,
            "node": worker.node,
            "gpus": list(worker.gpus),
            "cpus": worker.millicpus / 1000,
            "memory": worker.memory,
        }
        for rank, worker in enumerate(placement)
    ]


@dataclass(frozen=True)
class WorkerGpus:
    """The GPUs one worker of an attempt held: its node and their device indices."""

    node: str
    gpus: tuple[int, ...]


def attempt_gpus_from_json(stored: list[dict] | None) -> tuple[WorkerGpus, ...]:
    """An attempt's stored GPUs (one entry per worker, in rank order), typed."""
    return tuple(
        WorkerGpus(node=worker["node"], gpus=tuple(worker.get("gpus") or ()))
        for worker in stored or []
    )


def attempt_gpus_to_json(placement: Iterable[WorkerPlacement]) -> list[dict]:
    """The GPUs a placement holds, as an attempt stores them."""
    return [{"node": worker.node, "gpus": list(worker.gpus)} for worker in placement]


class FailureClass(models.TextChoices):
    USER = "user"
    INFRASTRUCTURE = "infrastructure"
    PREEMPTION = "preemption"
    UNKNOWN = "unknown"


class RetryOn(models.TextChoices):
    """Which failures a job spends its retries on: the values of
    ``jobmanager.retries.RetryOn``."""

    INFRASTRUCTURE = "infrastructure"
    ANY = "any"


class StopOutcome(models.TextChoices):
    """What a job becomes once the backend has stopped it (killing / pausing jobs)."""

    KILLED = "killed"
    PAUSED = "paused"
    REQUEUE = "requeue"  # preempted: back to the queue's head
    MOVED = "moved"  # moved off a failing node: back to the queue's head
    TIMEOUT = "timeout"


class JobQuerySet(models.QuerySet):
    def visible_to(self, user: User | AnonymousUser, action: Action = "view") -> JobQuerySet:
        """Owners see (and act on) their jobs, VC admins see and administer every job of
        their VCs, cluster admins all."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        administered = list(
            Membership.objects.filter(user=user, role=Role.ADMIN).values_list("vc_id", flat=True)
        )
        if action == "administer":
            return self.filter(vc_id__in=administered)
        if not administered:
            return self.filter(owner=user)
        return self.filter(Q(owner=user) | Q(vc_id__in=administered))

    def active(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def on_node(self, node_name: str) -> JobQuerySet:
        """These jobs with at least one worker placed on the node (placement is JSON, read
        here in one query: SQLite has no JSON containment lookup)."""
        pks = [
            pk
            for pk, placement in self.order_by().values_list("pk", "placement")
            if any(worker.node == node_name for worker in placement_from_json(placement))
        ]
        return self.filter(pk__in=pks)


class JobArrayQuerySet(models.QuerySet):
    def visible_to(self, user: User | AnonymousUser, action: Action = "view") -> JobArrayQuerySet:
        """As jobs: owners see theirs, VC admins their VCs' arrays, cluster admins all."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        administered = Membership.objects.filter(user=user, role=Role.ADMIN).values("vc_id")
        if action == "administer":
            return self.filter(vc_id__in=administered)
        return self.filter(Q(owner=user) | Q(vc_id__in=administered))


class JobArray(models.Model):
    """Jobs submitted as one (a sweep): one spec, one task per index, each its own job."""

    array_id = models.CharField(max_length=16, unique=True, default=new_job_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays"
    )
    vc = models.ForeignKey(VirtualCluster, on_delete=models.PROTECT, related_name="job_arrays")
    name = models.CharField(max_length=200)
    size = models.PositiveIntegerField(help_text="How many tasks (jobs) it was submitted with.")
    submitted_at = models.DateTimeField(default=timezone.now)

    objects = JobArrayQuerySet.as_manager()
    # Its tasks counted by status, where the API's views attach them (not a column).
    counts: dict[str, int]

    class Meta:
        ordering = ["-submitted_at", "-id"]

    def __str__(self) -> str:
        return f"{self.array_id} ({self.name}, {self.size} tasks)"


class Admission(models.TextChoices):
    """The answer a job with a deadline and a throughput curve got at submit."""

    MEETS = "meets", "Meets its deadline"
    BEST_EFFORT = "best_effort", "Cannot meet it: accepted best-effort"
    FLAGGED = "flagged", "Cannot meet it: accepted and flagged"


class Job(models.Model):
    job_id = models.CharField(max_length=16, unique=True, default=new_job_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    vc = models.ForeignKey(VirtualCluster, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=200)
    type = models.CharField(max_length=12, choices=JobType.choices, default=JobType.BATCH)
    image = models.CharField(max_length=500, blank=True)
    command = models.TextField()
    working_dir = models.CharField(max_length=1000, blank=True)
    env = models.JSONField(default=dict, blank=True)
    workers = models.PositiveIntegerField(default=1)
    # Elastic jobs (issue 34): the scheduler may run it at any size in [min, max]; both
    # equal workers for a job of fixed size. The VC's quota counts min_workers as
    # guaranteed; workers above it are borrowed, preemptible capacity.
    min_workers = models.PositiveIntegerField(
        default=1, help_text="The fewest workers it runs with (elastic jobs)."
    )
    max_workers = models.PositiveIntegerField(
        default=1, help_text="The most workers it grows to (elastic jobs)."
    )
    resizes = models.PositiveIntegerField(
        default=0, help_text="Times the scheduler grew or shrank it (each a re-rendezvous)."
    )
    resized_at = models.DateTimeField(null=True, blank=True)
    # Deadlines that scale (issue 34): work per second at 1, 2, ... workers (declared, or
    # learned from earlier runs, backend/jobs/throughput.py), the work it needs, and the
    # admission answer given at submit (jobmanager.core.deadlines).
    throughput = models.JSONField(
        default=list, blank=True, help_text="Work per second at 1, 2, ... workers."
    )
    work = models.FloatField(null=True, blank=True, help_text="The work it needs (samples).")
    admission = models.CharField(max_length=12, choices=Admission.choices, blank=True)
    admission_share = models.PositiveIntegerField(
        null=True, blank=True, help_text="Meets its deadline with at least this many workers."
    )
    earliest_finish = models.DateTimeField(null=True, blank=True)
    gpus_per_worker = models.PositiveIntegerField(default=0)
    cpus_per_worker = models.DecimalField(
        max_digits=8, decimal_places=3, validators=[MinValueValidator(Decimal("0.001"))]
    )
    memory_per_worker = models.PositiveIntegerField(help_text="MiB.")
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="jobs")
    preemptible = models.BooleanField(default=False)
    priority = models.IntegerField(default=0)
    max_retries = models.PositiveSmallIntegerField(default=3)
    retry_on = models.CharField(
        max_length=16,
        choices=RetryOn.choices,
        default=RetryOn.INFRASTRUCTURE,
        help_text="infrastructure: retries are spent on infrastructure failures and unknown "
        "causes, a user error fails the job at once; any: on every failure.",
    )
    max_wall_time = models.PositiveIntegerField(help_text="Seconds.")
    node_selector = models.JSONField(
        default=dict, blank=True, help_text="Labels the node of every worker must carry."
    )
    whole_nodes = models.BooleanField(
        default=False,
        help_text="With more than one worker: each worker gets a node of its own, all of it.",
    )
    same_switch = models.BooleanField(
        default=False,
        help_text="With more than one worker: all workers under one network switch, or wait.",
    )
    ports = models.JSONField(
        default=list,
        blank=True,
        help_text='Ports the owner reaches in a browser: [{"name": "jupyter", "port": 8888}].',
    )
    data_path = models.CharField(max_length=1000, blank=True)
    output_path = models.CharField(max_length=1000, blank=True)

    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED)
    status_message = models.TextField(blank=True)
    insight_message = models.TextField(blank=True, help_text="Why it waits, why it failed.")
    repair_message = models.TextField(blank=True, help_text="Moves forced by node repairs.")
    placement = models.JSONField(
        default=list, blank=True, help_text="One entry per worker: node and resources."
    )
    borrowing = models.BooleanField(
        default=False, help_text="Started beyond its VC's quota on idle GPUs: preemptible."
    )
    stop_outcome = models.CharField(
        max_length=10, choices=StopOutcome.choices, blank=True, help_text="Set while stopping."
    )
    attempt = models.PositiveSmallIntegerField(default=0, help_text="Runs started so far.")
    reserved_placement = models.JSONField(
        null=True,
        blank=True,
        help_text="Where a waiting job will start once the jobs preempted for it are gone.",
    )
    retries_used = models.PositiveSmallIntegerField(default=0)
    not_before = models.DateTimeField(
        null=True, blank=True, help_text="A retried job waits out its backoff until then."
    )
    estimated_start_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="When its owner needs it finished (optional)."
    )
    deadline_forecast = models.BooleanField(
        null=True,
        blank=True,
        help_text="Predicted to finish by its deadline (the start-time forecast); null: no "
        "deadline, or no forecast yet.",
    )
    exit_code = models.IntegerField(null=True, blank=True)
    failure_class = models.CharField(max_length=16, choices=FailureClass.choices, blank=True)
    failure_rule = models.CharField(max_length=100, blank=True)
    deploy_failures = models.PositiveSmallIntegerField(
        default=0, help_text="Deployments that failed in a row (the job fails at the limit)."
    )
    run_as = models.CharField(
        max_length=200, blank=True, help_text="The account its processes run as, when started."
    )
    limits = models.CharField(
        max_length=300, blank=True, help_text="The CPU and memory limits in force, and how."
    )
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    idle_since = models.DateTimeField(
        null=True, blank=True, help_text="Since when its GPUs have stayed idle (the idle watch)."
    )
    idle_warned_at = models.DateTimeField(
        null=True, blank=True, help_text="When its owner was warned that it would be killed."
    )
    array = models.ForeignKey(
        JobArray, on_delete=models.CASCADE, null=True, blank=True, related_name="jobs"
    )
    array_index = models.PositiveIntegerField(
        null=True, blank=True, help_text="Its index in its array (TRAINYARD_ARRAY_INDEX)."
    )

    submitted_at = models.DateTimeField(default=timezone.now)
    # Queue order; a preempted job keeps its original place.
    queued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["vc", "status", "priority", "queued_at"], name="job_queue_idx"),
            models.Index(fields=["owner", "submitted_at"], name="job_owner_idx"),
            # A member's jobs in one VC, newest first (the job list's commonest question), and
            # the count of what a VC admin sees of a VC, from the index alone.
            models.Index(fields=["vc", "owner", "submitted_at"], name="job_vc_owner_idx"),
            models.Index(fields=["vc", "submitted_at"], name="job_vc_idx"),
            models.Index(fields=["status", "submitted_at"], name="job_status_idx"),
            models.Index(fields=["submitted_at"], name="job_submitted_idx"),
            # /metrics counts jobs by status, VC and GPU type, and finds each VC's oldest
            # queued job, from this index alone.
            models.Index(fields=["status", "vc", "gpu_type", "queued_at"], name="job_metrics_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"], name="job_idempotency_key_unique"
            ),
            models.UniqueConstraint(fields=["array", "array_index"], name="job_array_index_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} ({self.name})"

    @classmethod
    def from_request(
        cls, owner: User, request: JobRequest, approval_reason: str = "", **fields: Any
    ) -> Job:
        """An unsaved job of the request, queued, or waiting for a VC admin's approval when
        there is an ``approval_reason``; ``fields`` set the rest (an array's, for one)."""
        now = timezone.now()
        return cls(
            job_id=new_job_id(),
            owner=owner,
            vc=request.vc,
            name=request.name,
            type=request.type,
            image=request.image,
            command=request.command,
            working_dir=request.working_dir,
            env=dict(request.env),
            workers=request.workers,
            min_workers=request.min_workers,
            max_workers=request.max_workers,
            gpus_per_worker=request.gpus_per_worker,
            cpus_per_worker=request.cpus_per_worker,
            memory_per_worker=request.memory_per_worker,
            gpu_type=request.gpu_type,
            preemptible=request.preemptible,
            priority=request.priority,
            max_retries=request.max_retries,
            retry_on=request.retry_on,
            max_wall_time=request.max_wall_time,
            data_path=request.data_path,
            output_path=request.output_path,
            node_selector=dict(request.node_selector),
            whole_nodes=request.whole_nodes,
            same_switch=request.same_switch,
            ports=[dict(port) for port in request.ports],
            deadline=request.deadline,
            throughput=list(request.throughput),
            work=request.work,
            admission=request.admission,
            admission_share=request.admission_share,
            earliest_finish=request.earliest_finish,
            status=JobStatus.UNAPPROVED if approval_reason else JobStatus.QUEUED,
            status_message=approval_reason,
            submitted_at=now,
            queued_at=now,
            **fields,
        )

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def is_elastic(self) -> bool:
        return self.min_workers < self.max_workers

    @property
    def borrowed_workers(self) -> int:
        """Its workers on borrowed, preemptible GPUs: all when it borrows, else an elastic
        job's above min_workers (the VC's quota counts min_workers as guaranteed)."""
        if self.borrowing:
            return self.workers
        return max(0, self.workers - self.min_workers) if self.is_elastic else 0

    @property
    def warnings(self) -> list[str]:
        """What its owner should know before it runs (an elastic job without checkpoints)."""
        warning = resize_warning(self.command, self.env or {}, self.min_workers, self.max_workers)
        return [warning] if warning else []

    @property
    def total_cpus(self) -> Decimal:
        return self.workers * self.cpus_per_worker

    @property
    def total_memory(self) -> int:
        return self.workers * self.memory_per_worker

    @property
    def placed_workers(self) -> tuple[WorkerPlacement, ...]:
        """Where each worker is placed, in rank order (none unless it holds resources)."""
        return placement_from_json(self.placement)

    @property
    def placed_nodes(self) -> list[str]:
        """The nodes its workers are placed on, sorted, each once."""
        return sorted({worker.node for worker in self.placed_workers})

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def wall_time_limit(self) -> int:
        """Seconds it may run: its own limit, capped by its VC's."""
        return min(self.max_wall_time, self.vc.max_wall_time)


class JobAttempt(models.Model):
    """One run of a job: where it ran, how it ended."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    nodes = models.JSONField(default=list)
    # Each worker's node and GPU indices, as placed: what its GPU metrics are read for.
    gpus = models.JSONField(default=list)
    borrowing = models.BooleanField(
        default=False, help_text="Ran beyond its VC's quota on borrowed GPUs (preemptible)."
    )
    # Its sizes over time (issue 34): [{"since": ISO time, "gpus": n, "borrowed": m}, ...],
    # one at its start and one at each resize of an elastic job, "borrowed" the GPUs of
    # its workers above min_workers (all of them when it borrows). Empty for attempts
    # recorded before sizes were kept: ``gpu_count`` for its whole life.
    sizes = models.JSONField(default=list, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    failure_class = models.CharField(max_length=16, choices=FailureClass.choices, blank=True)
    failure_rule = models.CharField(max_length=100, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="attempt_number_unique")
        ]
        # Usage reads the attempts ended since it last looked (backend/jobs/history.py).
        indexes = [models.Index(fields=["ended_at"], name="attempt_ended_idx")]

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.number}"

    @property
    def placed_gpus(self) -> tuple[WorkerGpus, ...]:
        """Each worker's node and GPU indices, in rank order."""
        return attempt_gpus_from_json(self.gpus)

    @property
    def gpu_count(self) -> int:
        """How many GPUs it held, all workers together."""
        return sum(len(worker.gpus) for worker in self.placed_gpus)

    def sizes_over(self, end: datetime) -> list[tuple[datetime, datetime, int, int]]:
        """(from, to, GPUs, borrowed GPUs) from its start to ``end``, split at each resize;
        without sizes recorded, its start size all along (borrowed all when it borrowed)."""
        gpus = self.gpu_count
        steps = [(self.started_at, gpus, gpus if self.borrowing else 0)]
        for size in self.sizes:
            since = max(datetime.fromisoformat(size["since"]), self.started_at)
            step = (since, int(size["gpus"]), int(size["borrowed"]))
            steps = [*steps[:-1], step] if since <= steps[-1][0] else [*steps, step]
        spans = []
        for index, (since, count, borrowed) in enumerate(steps):
            until = steps[index + 1][0] if index + 1 < len(steps) else end
            until = min(until, end)
            if until > since:
                spans.append((since, until, count, borrowed))
        return spans


def attempt_size(job: Job, at: datetime) -> dict[str, object]:
    """A job's size now, as an attempt records it (``JobAttempt.sizes``)."""
    return {
        "since": at.isoformat(),
        "gpus": job.workers * job.gpus_per_worker,
        "borrowed": job.borrowed_workers * job.gpus_per_worker,
    }


class JobEvent(models.Model):
    """A change of a job's status: from what, to what, by whom and why."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    from_status = models.CharField(max_length=12, choices=JobStatus.choices, blank=True)
    to_status = models.CharField(max_length=12, choices=JobStatus.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_name = models.CharField(max_length=150, help_text="User name, or the system part.")
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["job", "created_at", "id"]
        indexes = [models.Index(fields=["job", "created_at"], name="job_event_idx")]

    def __str__(self) -> str:
        return f"{self.from_status or 'new'} -> {self.to_status} by {self.actor_name}"
