"""The Node repair page end to end: node agents serving GPU health, the Debian Prometheus
scraping them, the repair manager in a real Celery worker and beat taking a node out for a
fault injected through its agent, and a cluster admin in headless Chromium reading the
fault, what the safety valve held back and the history, and moving a node by hand."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from backend.clusters.models import Node
from tests.backend.repair_support import (  # noqa: F401 - the fixture
    start_agents,
    start_prometheus,
    stop_at_end_fixture,
)
from tests.e2e import test_dashboard
from tests.e2e.dashboard import live_servers
from tests.polling import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

WAIT_MS = test_dashboard.WAIT_MS
browser = test_dashboard.browser
screenshots = test_dashboard.screenshots
open_browser = test_dashboard.open_browser
ECC = {"gpus": {"3": {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1}}}


@pytest.fixture
def agents(world, tmp_path, stop_at_end):
    gpu_nodes = [node.name for node in world.nodes if node.gpus]
    running = {agent.node: agent for agent in start_agents(tmp_path, gpu_nodes, gpus=8)}
    stop_at_end.extend(running.values())
    return running


@pytest.fixture
def prometheus(tmp_path, agents, stop_at_end):
    running = start_prometheus(tmp_path / "prometheus", [a.target for a in agents.values()])
    stop_at_end.append(running)
    wait_until(lambda: running.sees("count(DCGM_FI_DEV_GPU_TEMP)", 32), 30, "all GPUs scraped")
    return running


@pytest.fixture
def servers(world, host_tmp, redis_url, prometheus):
    repair = {
        "TRAINYARD_PROMETHEUS_URL": prometheus.url,
        "TRAINYARD_REPAIR_INTERVAL": "1",
        "TRAINYARD_REPAIR_MAX_OUT_SHARE": "0.2",  # 1 of the world's 6 nodes
    }
    with live_servers(host_tmp, redis_url, test_dashboard.NODES, extra_env=repair) as running:
        yield running


def test_the_repair_page_shows_an_injected_fault_the_safety_valve_and_a_manual_move(
    open_browser, agents, prometheus
):
    agents["a100-2"].inject(ECC)
    wait_until(
        lambda: Node.objects.get(name="a100-2").repair_state != "in_service", 60, "a100-2 out"
    )  # out of the pool, and, with no job there, ready for repair
    agents["a100-3"].inject(ECC)  # the safety valve keeps this one in service

    window = open_browser(viewport={"width": 1600, "height": 900})
    page = window.page
    window.sign_in("root")
    page.get_by_role("link", name="Node repair").click()

    states = page.get_by_role("table", name="Repair state")
    out = states.get_by_role("row").filter(has_text="a100-2").first
    expect(out.locator(".badge")).to_have_text("ready for repair")
    expect(out).to_contain_text("double-bit ECC error on GPU 3")
    held = page.get_by_role("table", name="Held back")
    expect(held).to_contain_text("a100-3", timeout=WAIT_MS)
    expect(held).to_contain_text("safety valve")
    out.get_by_role("button", name="History").click()
    history = page.get_by_role("table", name="History of a100-2")
    expect(history).to_contain_text("in service → out of pool")
    expect(history).to_contain_text("rule ecc-double-bit")
    expect(history).to_contain_text("out of pool → ready for repair")
    window.shot("node-repair")

    # The admin repairs it by hand; once its GPUs are healthy, validation returns it.
    out.get_by_label("Reason for moving a100-2").fill("GPU 3 reseated")
    out.get_by_role("button", name="Move").click()  # to in repair, its only next state
    expect(out.get_by_role("status")).to_have_text("Moved to in repair.")
    expect(history).to_contain_text(re.compile(r"ready for repair → in repair\s*GPU 3 reseated"))
    agents["a100-2"].clear()
    ecc = 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{Hostname="a100-2"} > 0'
    wait_until(lambda: not prometheus.query(ecc), 30, "the repaired GPU scraped healthy")
    out.get_by_role("button", name="Move").click()  # to after repair
    expect(out.get_by_role("status")).to_have_text("Moved to after repair.")
    expect(out.locator(".badge")).to_have_text("in service", timeout=WAIT_MS)  # validated
    expect(history).to_contain_text("validation passed")
    assert Node.objects.get(name="a100-2").repair_state == "in_service"
