"""What a pass needs to know of the running jobs, summed: each VC's guaranteed use of its
quota, interactive and borrowed GPUs, the jobs that may be preempted, each user's GPUs
for fair share, and the jobs in order of expected end for reservations. The live system
builds it from a snapshot; the simulator keeps one up to date as jobs start and stop, so
that a pass does not read every running job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from jobmanager.core.reservations import RunningEnds
from jobmanager.core.snapshot import NO_RESOURCES, JobShape, RunningJob, VcState


class QuotaUse:
    """What each VC's guaranteed work holds of each GPU type (GPUs, millicores, MiB)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], list[int]] = {}

    def add(self, vc: str, shape: JobShape, sign: int = 1) -> None:
        """Count the job (sign -1: no longer)."""
        held = self._held.setdefault((vc, shape.gpu_type), [0, 0, 0])
        per_worker, workers = shape.per_worker, shape.workers * sign
        held[0] += per_worker.gpus * workers
        held[1] += per_worker.millicpus * workers
        held[2] += per_worker.memory * workers

    def gpus(self, vc: str, gpu_type: str) -> int:
        return self._held.get((vc, gpu_type), (0, 0, 0))[0]

    def room_for(self, vc: VcState, shape: JobShape) -> bool:
        """Whether the VC's quota has room for the job besides its guaranteed work."""
        quota = vc.quota.get(shape.gpu_type, NO_RESOURCES)
        held = self._held.get((vc.name, shape.gpu_type), (0, 0, 0))
        per_worker, workers = shape.per_worker, shape.workers
        return (
            held[0] + per_worker.gpus * workers <= quota.gpus
            and held[1] + per_worker.millicpus * workers <= quota.millicpus
            and held[2] + per_worker.memory * workers <= quota.memory
        )

    def take(self, vc: VcState, shape: JobShape) -> bool:
        """Count the job if the VC's quota has room for it (``room_for`` then ``add``, in
        one: a pass asks it of every borrower)."""
        quota = vc.quota.get(shape.gpu_type, NO_RESOURCES)
        key = (vc.name, shape.gpu_type)
        held = self._held.get(key)
        per_worker, workers = shape.per_worker, shape.workers
        gpus, millicpus, memory = (
            per_worker.gpus * workers,
            per_worker.millicpus * workers,
            per_worker.memory * workers,
        )
        if held is None:
            if gpus <= quota.gpus and millicpus <= quota.millicpus and memory <= quota.memory:
                self._held[key] = [gpus, millicpus, memory]
                return True
            return False
        if (
            held[0] + gpus <= quota.gpus
            and held[1] + millicpus <= quota.millicpus
            and held[2] + memory <= quota.memory
        ):
            held[0] += gpus
            held[1] += millicpus
            held[2] += memory
            return True
        return False

    def copy(self) -> QuotaUse:
        copied = QuotaUse()
        copied._held = {key: list(held) for key, held in self._held.items()}
        return copied


class RunningSummary:
    def __init__(self) -> None:
        self.guaranteed = QuotaUse()  # running jobs neither borrowing nor preemptible
        self.interactive_gpus: dict[str, int] = defaultdict(int)
        self.borrowed_gpus: dict[str, int] = defaultdict(int)
        self.preemptible: dict[str, RunningJob] = {}  # those that can be preempted
        # The same by VC, in the same order (least attained service looks for victims
        # among its own VC's).
        self.preemptible_of: dict[str, dict[str, RunningJob]] = defaultdict(dict)
        self.borrowers: dict[str, RunningJob] = {}  # borrowing, not preemptible, not releasing
        # Fair share: GPUs and GPUs x start time by (VC, user), so that the GPU-seconds
        # they ran so far at ``now`` are gpus * now - gpu_starts.
        self.gpus: dict[tuple[str, str], float] = defaultdict(float)
        self.gpu_starts: dict[tuple[str, str], float] = defaultdict(float)
        # For reservations: the jobs by expected end, in the order they were added (the
        # snapshot's running order, which breaks ties between equal ends).
        self.ends = RunningEnds()
        # Whether each was overdue when it started (jobmanager.core.overdue.was_overdue),
        # kept while it runs and the wait limits stay those of ``overdue_limits``.
        self.was_overdue: dict[str, bool] = {}
        self.overdue_limits: object = None

    @classmethod
    def of(cls, running: Iterable[RunningJob]) -> RunningSummary:
        summary = cls()
        for job in running:
            summary.add(job)
        return summary

    def add(self, job: RunningJob, sign: int = 1) -> None:
        """Count a running job (sign -1: no longer)."""
        gpus = job.shape.total.gpus
        if not (job.preemptible or job.borrowing):
            self.guaranteed.add(job.vc, job.shape, sign)
        if job.interactive:
            self.interactive_gpus[job.vc] += sign * gpus
        if job.borrowing:
            self.borrowed_gpus[job.vc] += sign * gpus
        self.was_overdue.pop(job.id, None)
        for jobs, member in (
            (self.preemptible, job.can_be_preempted),
            (self.preemptible_of[job.vc], job.can_be_preempted),
            (self.borrowers, job.borrowing and not (job.preemptible or job.releasing)),
        ):
            if member and sign > 0:
                jobs[job.id] = job
            elif member:
                jobs.pop(job.id, None)
        if sign > 0:
            self.ends.add(job)
        else:
            self.ends.remove(job)
        key = (job.vc, job.user)
        self.gpus[key] += sign * gpus
        self.gpu_starts[key] += sign * gpus * job.started_at

    def remove(self, job: RunningJob) -> None:
        self.add(job, sign=-1)

    def overdue_starts(self, limits: object) -> dict[str, bool]:
        """``was_overdue`` for a pass whose wait limits are ``limits`` (emptied if they
        differ from the last pass's)."""
        if limits != self.overdue_limits:
            self.was_overdue.clear()
            self.overdue_limits = limits
        return self.was_overdue

    def ran(self, key: tuple[str, str], now: float) -> float:
        """GPU-seconds the (VC, user)'s running jobs have run so far."""
        return max(0.0, self.gpus.get(key, 0.0) * now - self.gpu_starts.get(key, 0.0))
