"""The trace simulator: replays GPU job traces (Microsoft ITP and Philly,
the Philly and Helios samples of Gen-Parallel-Workloads, or synthetic) on a
simulated cluster with the same scheduling core as the live job manager, and compares
queue policies and placements. Nothing here imports Django, Celery or Kubernetes.

Command line: ``python -m jobmanager.simulate --help``.
"""

from jobmanager.simulate.cluster import ClusterSpec, nodes_for_load, split_quotas
from jobmanager.simulate.engine import Replay, ReplayError, replay
from jobmanager.simulate.loaders import load_gpw, load_itp, load_philly
from jobmanager.simulate.metrics import RunMetrics, measure
from jobmanager.simulate.synthetic import SyntheticSpec, generate
from jobmanager.simulate.trace import Trace, TraceError, TraceJob

__all__ = [
    "ClusterSpec",
    "Replay",
    "ReplayError",
    "RunMetrics",
    "SyntheticSpec",
    "Trace",
    "TraceError",
    "TraceJob",
    "generate",
    "load_gpw",
    "load_itp",
    "load_philly",
    "measure",
    "nodes_for_load",
    "replay",
    "split_quotas",
]
