"""The counters and histograms Trainyard's processes update as things happen.

prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by the settings
to TRAINYARD_METRICS_DIR) keeps each process's values in files there; /metrics adds up
those of every gunicorn worker and of Celery's worker and beat. What the database knows
(jobs, GPUs, queues, nodes) is read at scrape time instead (backend/monitoring/collectors.py).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

MINUTE, HOUR = 60, 3600
WAIT_BUCKETS = (
    1, 5, 15, 30, MINUTE, 5 * MINUTE, 15 * MINUTE, 30 * MINUTE, HOUR, 4 * HOUR, 12 * HOUR,
    24 * HOUR, 3 * 24 * HOUR, float("inf"),
)  # fmt: skip
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))
DATABASE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, float("inf"))

JOB_WAIT_SECONDS = Histogram(
    "trainyard_job_wait_seconds",
    "Seconds from a job's submission to its first start (running).",
    buckets=WAIT_BUCKETS,
)
JOB_STATE_CHANGE_LATENCY_SECONDS = Histogram(
    "trainyard_job_state_change_latency_seconds",
    "Seconds a job spent in one status before it changed to the next.",
    ["from", "to"],
    buckets=WAIT_BUCKETS,
)
JOBS_ENDED = Counter(
    "trainyard_jobs_ended",
    "Jobs that ended (finished, failed, killed, timeout), by how and VC.",
    ["status", "vc"],
)
SCHEDULER_PASS_SECONDS = Histogram(
    "trainyard_scheduler_pass_seconds",
    "Seconds one scheduling pass took (snapshot, decide, apply).",
    buckets=PASS_BUCKETS,
)
SCHEDULER_DECISIONS = Counter(
    "trainyard_scheduler_decisions",
    "The scheduler's decisions, by kind: start, preempt, wait (one per waiting job a pass).",
    ["kind"],
)
DEPLOY_FAILURES = Counter(
    "trainyard_deploy_failures", "Deployments of a placed job to the backend that failed."
)
IDLE_KILLS = Counter("trainyard_idle_kills", "Jobs killed for leaving their GPUs idle.")
IDLE_WATCH_UNMEASURED_JOBS = Gauge(
    "trainyard_idle_watch_unmeasured_jobs",
    "Running GPU jobs whose utilisation the idle watch could not read at its last pass "
    "(no action is taken on them).",
    multiprocess_mode="mostrecent",
)
VIEW_DATABASE_SECONDS = Histogram(
    "trainyard_view_database_seconds",
    "Seconds a request spent in database queries, by view.",
    ["view"],
    buckets=DATABASE_BUCKETS,
)


def record_decisions(starts: int, preemptions: int, waits: int) -> None:
    for kind, count in (("start", starts), ("preempt", preemptions), ("wait", waits)):
        if count:
            SCHEDULER_DECISIONS.labels(kind=kind).inc(count)
