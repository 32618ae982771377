"""serve_metrics: a Celery worker's counters served apart from the web server (its own pod
on Kubernetes), from the processes that share its metrics directory; and who of this host
may scrape it, or the web server's /metrics, without a token."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.polling import wait_until
from tests.servers import ROOT, free_port, kill_process_group, session_database_url, start_gunicorn
from tests.unix_accounts import JOB_PYTHON, job_account, require_root

pytestmark = pytest.mark.django_db(transaction=True)
COUNT = (
    "import django; django.setup();"
    "from backend.core.instruments import DEPLOY_FAILURES, JOB_WAIT_SECONDS;"
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


FETCH = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)
except urllib.error.HTTPError as error:
    print(error.code, error.read().decode())
"""


def fetch_as(account, url: str) -> str:
    """``url`` fetched by a process of ``account`` (a job's, say): its status and refusal."""
    done = subprocess.run(
        [JOB_PYTHON, "-c", FETCH, url], cwd="/", capture_output=True, text=True, timeout=60,
        user=account.uid, group=account.gid, extra_groups=list(account.groups),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("server", ["web", "serve_metrics"])
def test_without_a_token_a_job_of_this_host_may_not_scrape(server, tmp_path):
    """Every account of the host reaches its loopback ports, a job run as its owner too:
    the server asks the kernel whose socket connected, and serves root, its own account
    and TRAINYARD_METRICS_LOCAL_ACCOUNTS (Debian's Prometheus runs as ``prometheus``)."""
    require_root()
    job, prometheus = job_account("scraper"), job_account("prometheus")
    env = {
        "TRAINYARD_VAR_DIR": str(tmp_path / "var"),
        "TRAINYARD_METRICS_TOKEN": "",
        "TRAINYARD_METRICS_LOCAL_ACCOUNTS": f"nobody-here,{prometheus.name}",
    }
    if server == "web":
        process, base_url = start_gunicorn(extra_env=env)
        url = f"{base_url}/metrics"
    else:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve_metrics", "--port", str(port)],
            cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
            env=os.environ | {"DATABASE_URL": session_database_url()} | env,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_until(lambda: _answers(url), 30, f"{server} to answer")
        as_root = requests.get(url, timeout=10)
        as_job = fetch_as(job, url)
        as_prometheus = fetch_as(prometheus, url)
    finally:
        kill_process_group(process)
    assert as_root.status_code == 200
    assert "trainyard_" in as_root.text
    assert as_job.startswith("403 ")
    assert "jobs run here as their owners" in as_job
    assert "trainyard_" not in as_job
    assert as_prometheus.strip() == "200"


def _answers(url: str) -> bool:
    try:
        requests.get(url, timeout=1)
    except requests.RequestException:
        return False
    return True
