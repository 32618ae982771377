"""The scheduling core: pure functions from a cluster snapshot to decisions.

Nothing here imports Django, Celery or Kubernetes; the live job manager and the trace
simulator both call :func:`jobmanager.core.scheduler.schedule`.
"""

from jobmanager.core.elastic import schedule_elastic
from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import (
    Decisions,
    Elastic,
    NodeState,
    Preemption,
    QueuedJob,
    Resize,
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
    "Elastic",
    "NodeState",
    "Preemption",
    "QueuedJob",
    "Resize",
    "Resources",
    "RunningJob",
    "Snapshot",
    "Start",
    "VcState",
    "Wait",
    "WorkerPlacement",
    "schedule",
    "schedule_elastic",
]
