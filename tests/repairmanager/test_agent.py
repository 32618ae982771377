"""The node agent as a process: dcgm-exporter's names, declared GPUs and injected faults."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.backend.repair_support import start_agents
from tests.servers import ROOT, kill_process_group


def scrape(agent) -> dict[tuple[str, str], float]:
    text = requests.get(f"http://{agent.target}/metrics", timeout=5).text
    return {
        (sample.name, sample.labels.get("gpu", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("Hostname") == agent.node
    }


@pytest.fixture
def agent(tmp_path):
    [agent] = start_agents(tmp_path, ["gpu-07"], gpus=4)
    yield agent
    kill_process_group(agent.process)


def test_the_agent_serves_healthy_declared_gpus_under_dcgm_names(agent):
    metrics = scrape(agent)
    assert metrics[("trainyard_agent_gpus", "")] == 4
    assert metrics[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "3")] == 0
    assert metrics[("DCGM_FI_DEV_GPU_TEMP", "0")] == 40
    assert ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL_total", "3") not in metrics  # names kept exactly
    assert metrics[("trainyard_agent_heartbeat_timestamp_seconds", "")] > 1.7e9


def test_injected_faults_show_from_the_next_scrape_and_clear(agent):
    agent.inject({"visible_gpus": 3, "gpus": {"1": {"DCGM_FI_DEV_XID_ERRORS": 79}}})
    metrics = scrape(agent)
    assert metrics[("trainyard_agent_gpus", "")] == 3
    assert ("DCGM_FI_DEV_GPU_TEMP", "3") not in metrics  # fallen off the bus
    assert metrics[("DCGM_FI_DEV_XID_ERRORS", "1")] == 79
    agent.clear()
    metrics = scrape(agent)
    assert metrics[("trainyard_agent_gpus", "")] == 4
    assert metrics[("DCGM_FI_DEV_XID_ERRORS", "1")] == 0


def test_without_gpus_or_declared_ones_the_agent_says_what_to_do():
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has NVML: the agent would read real GPUs")
    except Exception:
        pass
    result = subprocess.run(
        [sys.executable, "-m", "repairmanager.agent", "--node", "n", "--port", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "NVML is not available" in result.stderr and "--declared-gpus" in result.stderr
