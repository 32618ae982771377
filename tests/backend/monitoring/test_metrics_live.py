"""The Debian Prometheus scraping the portal's /metrics (gunicorn with two workers, a
Celery worker and beat running the job manager): after a burst of jobs, the scraped
series agree with the database."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from backend.jobs.models import Job
from jobmanager.backends.memory import MemoryBackend
from tests.backend.live_support import LiveSystem, ffdl_cluster, live_env, start_beat, start_worker  # noqa: F401 (fixtures)
from tests.backend.repair_support import start_prometheus
from tests.polling import wait_until
from tests.servers import kill_process_group, start_gunicorn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


@pytest.fixture
def scraped_system(ffdl_cluster, tmp_path, redis_url):  # noqa: F811 - the fixture
    env = live_env(tmp_path, redis_url) | {
        "TRAINYARD_JOB_MANAGER_INTERVAL": "1",
        "TRAINYARD_DEPLOY_BACKOFF_SECONDS": "0",  # a failed deployment is retried at once
    }
    web, base_url = start_gunicorn(extra_env=env, workers=2)
    others = [start_worker(env, "metrics"), start_beat(env, tmp_path)]
    prometheus = None
    try:
        target = base_url.removeprefix("http://")
        prometheus = start_prometheus(tmp_path / "prometheus", [target])
        backend = MemoryBackend(state_path=env["TRAINYARD_MEMORY_BACKEND_STATE"])
        yield LiveSystem(base_url, ffdl_cluster, backend, env), prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        for process in (web, *others):
            kill_process_group(process)


def by_label(prometheus, promql: str, label: str) -> dict[str, float]:
    rows = prometheus.query(promql)
    return {row["metric"].get(label, ""): float(row["value"][1]) for row in rows}


def test_after_a_burst_the_scraped_series_agree_with_the_database(scraped_system):
    system, prometheus = scraped_system
    body = {"vc": "ffdl", "command": "python train.py", "workers": 2, "gpus_per_worker": 2}
    system.backend.fail_next_deploys(2)  # two jobs go back to the queue once, then start
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda _: system.submit(body), range(20)))  # 15 fit on 60 GPUs

    def statuses() -> Counter:
        return Counter(Job.objects.filter(job_id__in=ids).values_list("status", flat=True))

    wait_until(lambda: statuses() == Counter(running=15, queued=5), 60, "15 running, 5 queued")
    # Series scraped after the burst settled: the job counts by status as the database has them.
    wait_until(
        lambda: (
            by_label(prometheus, "sum by (status) (trainyard_jobs)", "status")
            == {"running": 15, "queued": 5}
        ),
        30,
        "Prometheus to scrape the settled counts",
    )

    used = by_label(prometheus, 'sum by (vc) (trainyard_gpus{state="used"})', "vc")
    assert used == {"ffdl": 60}
    free = prometheus.query('sum(trainyard_gpus{state="free"})')
    assert float(free[0]["value"][1]) == 0
    # Every job that started observed once (not again after a failed deployment).
    waits = prometheus.query("trainyard_job_wait_seconds_count")
    assert [float(row["value"][1]) for row in waits] == [15]
    failures = prometheus.query("trainyard_deploy_failures_total")
    assert [float(row["value"][1]) for row in failures] == [2]
    starts = prometheus.query('trainyard_scheduler_decisions_total{kind="start"}')
    assert [float(row["value"][1]) for row in starts] == [15 + 2]  # two placed twice
    passes = prometheus.query("trainyard_scheduler_pass_seconds_count")
    assert float(passes[0]["value"][1]) >= 1
    latency = by_label(
        prometheus,
        'sum by (to) (trainyard_job_state_change_latency_seconds_count{from="scheduling"})',
        "to",
    )
    assert latency == {"running": 15, "queued": 2}
    oldest = prometheus.query('trainyard_queue_oldest_wait_seconds{vc="ffdl"}')
    assert float(oldest[0]["value"][1]) > 0
    last_pass = prometheus.query("time() - trainyard_scheduler_last_pass_timestamp_seconds")
    assert float(last_pass[0]["value"][1]) < 30  # the scheduler runs
