"""serve_metrics: a Celery worker's counters served apart from the web server (its own pod
on Kubernetes), from the processes that share its metrics directory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import ROOT, free_port, kill_process_group, session_database_url, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
COUNT = (
    "import django; django.setup();"
    "from backend.monitoring.instruments import DEPLOY_FAILURES, JOB_WAIT_SECONDS;"
    "DEPLOY_FAILURES.inc(3); JOB_WAIT_SECONDS.observe(42)"
)


def test_it_serves_what_other_processes_counted_and_asks_for_the_token(tmp_path):
    env = os.environ | {
        "DATABASE_URL": session_database_url(),
        "TRAINYARD_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_SETTINGS_MODULE": "backend.settings",
        "TRAINYARD_METRICS_TOKEN": "worker-scrape-token",
    }
    subprocess.run([sys.executable, "-c", COUNT], cwd=ROOT, env=env, check=True, timeout=60)
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, "manage.py", "serve_metrics", "--port", str(port)],
        cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_until(lambda: _answers(url), 30, "serve_metrics to answer")
        assert requests.get(url, timeout=5).status_code == 403
        token = {"Authorization": "Bearer worker-scrape-token"}
        answer = requests.get(url, headers=token, timeout=5)
    finally:
        kill_process_group(exporter)
    assert answer.status_code == 200
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
        if not sample.labels
    }
    assert samples["trainyard_deploy_failures_total"] == 3
    assert samples["trainyard_job_wait_seconds_count"] == 1
    assert samples["trainyard_job_wait_seconds_sum"] == 42
    assert "trainyard_jobs" not in answer.text  # the database's gauges come from the web


def _answers(url: str) -> bool:
    try:
        requests.get(url, timeout=1)
    except requests.RequestException:
        return False
    return True
