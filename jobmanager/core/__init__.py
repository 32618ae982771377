"""The scheduling core: pure functions from a cluster snapshot to decisions.

Nothing here imports Django, Celery or Kubernetes; the live job manager and the trace
simulator both call :func:`jobmanager.core.scheduler.schedule`.
"""

from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    Decisions,
    NodeState,
    Preemption,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    Start,
    VcState,
    Wait,
    WorkerPlacement,
)

__all__ = [
    "Decisions",
    "NodeState",
    "Preemption",
    "QueuedJob",
    "Resources",
    "RunningJob",
    "Snapshot",
    "Start",
    "VcState",
    "Wait",
    "WorkerPlacement",
    "schedule",
]
