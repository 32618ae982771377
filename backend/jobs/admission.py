"""Admission of jobs with a deadline and a throughput curve (issue 34): the answer the
pure core gives (jobmanager.core.deadlines.admit) on the cluster as it is now, and what
the job's VC does with a deadline that cannot be met (VirtualCluster.infeasible_deadlines).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils import timezone

from backend.core.quantities import millicpus
from backend.jobs.job_request import JobRequest
from backend.jobs.models import Admission, JobType
from backend.jobs.snapshot import load_snapshot
from backend.vcs.models import InfeasibleDeadlines
from jobmanager.core.deadlines import admit
from jobmanager.core.snapshot import Elastic, JobShape, QueuedJob, Resources

ADMISSION_ID = "(admission)"  # no real job id has parentheses


def request_as_queued(request: JobRequest, job_id: str, now: datetime) -> QueuedJob:
    """The job a submission would be, as the scheduler sees a waiting job."""
    low, high = request.min_workers, request.max_workers
    return QueuedJob(
        id=job_id,
        vc=request.vc.name,
        shape=JobShape(
            gpu_type=request.gpu_type.name,
            workers=request.workers,
            per_worker=Resources(
                request.gpus_per_worker,
                millicpus(request.cpus_per_worker),
                request.memory_per_worker,
            ),
            node_selector=tuple(sorted(request.node_selector.items())),
            whole_nodes=request.whole_nodes or request.vc.whole_nodes_for_distributed,
            same_switch=request.same_switch,
        ),
        queued_at=now.timestamp(),
        priority=request.priority,
        preemptible=request.preemptible,
        interactive=request.type == JobType.INTERACTIVE,
        max_wall_time=float(min(request.max_wall_time, request.vc.max_wall_time)),
        due=None if request.deadline is None else request.deadline.timestamp(),
        elastic=Elastic(low, high, throughput=request.throughput, work=request.work)
        if low < high
        else None,
    )


@dataclass(frozen=True)
class AdmissionAnswer:
    """What the job is told at submit, and whether its VC refuses it."""

    admission: str  # an Admission value
    share: int | None  # meets the deadline with at least this many workers from now
    earliest_finish: datetime | None  # None: it cannot start on this cluster
    refused: bool

    @property
    def refusal(self) -> str:
        """The 400's message for ``deadline`` when refused."""
        if self.earliest_finish is None:
            return "Cannot be met: the job cannot start on this cluster as it is."
        when = self.earliest_finish.isoformat().replace("+00:00", "Z")
        return f"Cannot be met: the earliest finish is {when}."


def admission_answer(request: JobRequest) -> AdmissionAnswer | None:
    """The admission answer for a submission with a deadline, a curve and its work (None
    without them)."""
    if request.deadline is None or not request.throughput or request.work is None:
        return None
    now = timezone.now()
    candidate = request_as_queued(request, ADMISSION_ID, now)
    answer = admit(load_snapshot(now), candidate, request.throughput, request.work)
    finish = (
        datetime.fromtimestamp(answer.earliest_finish, tz=UTC).replace(microsecond=0)
        if answer.earliest_finish != float("inf")
        else None
    )
    if answer.feasible:
        return AdmissionAnswer(Admission.MEETS, answer.share, finish, refused=False)
    choice = request.vc.infeasible_deadlines
    admission = (
        Admission.BEST_EFFORT if choice == InfeasibleDeadlines.BEST_EFFORT else Admission.FLAGGED
    )
    return AdmissionAnswer(
        admission, answer.share, finish, refused=choice == InfeasibleDeadlines.REFUSE
    )


def late_warning(admission: str, earliest_finish: str | datetime | None) -> str:
    """What the job page says of a job admitted knowing it cannot meet its deadline."""
    if admission not in (Admission.FLAGGED, Admission.BEST_EFFORT):
        return ""
    when = (
        "it cannot start on the cluster as it was"
        if earliest_finish is None
        else (f"its earliest finish was {earliest_finish}")
    )
    kind = "best-effort" if admission == Admission.BEST_EFFORT else "flagged"
    return f"Its deadline cannot be met ({when} at submit): accepted {kind}."
