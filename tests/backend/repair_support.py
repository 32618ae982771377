"""Real parts for the repair manager's tests: node agents, Prometheus scraping them, and an
SMTP server that keeps what it receives. A test module imports the ``*_fixture`` names to
use the fixtures ``eager_celery`` and ``stop_at_end`` (and ``smtp`` from tests.smtp)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.polling import wait_until
from tests.servers import ROOT, free_port, kill_process_group

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCRAPE_INTERVAL = "1s"


@dataclass
class NodeAgent:
    node: str
    port: int
    faults_file: Path
    process: subprocess.Popen

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def inject(self, faults: dict) -> None:
        """Faults the agent serves from its next scrape on (see repairmanager.agent)."""
        temporary = self.faults_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(faults))
        temporary.replace(self.faults_file)

    def clear(self) -> None:
        self.inject({})


def start_agents(directory: Path, nodes: list[str], gpus: int) -> list[NodeAgent]:
    agents = []
    for node in nodes:
        port = free_port()
        faults = directory / f"{node}-faults.json"
        process = subprocess.Popen(
            [sys.executable, "-m", "repairmanager.agent", "--node", node, "--port", str(port),
             "--address", "127.0.0.1", "--declared-gpus", str(gpus), "--faults", str(faults)],
            cwd=ROOT, start_new_session=True, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        agents.append(NodeAgent(node, port, faults, process))
    for agent in agents:
        wait_until(lambda a=agent: _answers(f"http://{a.target}/metrics"), 30, f"{agent.node}")
    return agents


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen

    def query(self, promql: str) -> list[dict]:
        response = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        return response.json()["data"]["result"]

    def sees(self, promql: str, count: int) -> bool:
        result = self.query(promql)
        return bool(result) and float(result[0]["value"][1]) == count

    def stop(self) -> None:
        kill_process_group(self.process)


def start_prometheus(directory: Path, targets: list[str]) -> Prometheus:
    """The Debian package's Prometheus on a free port, scraping ``targets`` every second."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
                "scrape_configs": [
                    {"job_name": "trainyard-node-agent", "static_configs": [{"targets": targets}]}
                ],
            }
        )
    )
    port = free_port()
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=error"],
        start_new_session=True, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    prometheus = Prometheus(f"http://127.0.0.1:{port}", process)
    try:
        wait_until(lambda: _answers(f"{prometheus.url}/-/ready"), 30, "Prometheus to be ready")
    except BaseException:
        prometheus.stop()
        raise
    return prometheus


@pytest.fixture(name="eager_celery")
def eager_celery_fixture() -> Iterator[None]:
    """Tasks queued on commit (the email sender) run at once in this process."""
    from backend.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


@pytest.fixture(name="stop_at_end")
def stop_at_end_fixture() -> Iterator[list]:
    """Processes (agents, Prometheus) a test started, stopped when it ends."""
    started: list = []
    yield started
    for item in started:
        if isinstance(item, Prometheus):
            item.stop()
        else:
            kill_process_group(item.process)
