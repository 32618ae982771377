"""deploy/prometheus and deploy/grafana: the alert rules pass promtool's checks and unit
tests, and every expression of the rules and the dashboard names metrics /metrics exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml
from django.test import Client
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from backend.core import instruments
from tests.backend.metrics_support import SCRAPE_TOKEN
from tests.servers import ROOT

pytestmark = pytest.mark.django_db
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "trainyard-dashboard.json"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
OURS = re.compile(r"\b(?:trainyard|django)_[a-z0-9_]+\b")
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""]}


def promtool(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PROMTOOL, *arguments], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=60
    )


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests():
    checked = promtool("check", "rules", "trainyard-alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "trainyard-alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    config = promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


@pytest.fixture
def exported(world, settings) -> set[str]:
    """Every name /metrics serves (after a request), and those of every instrument."""
    client = Client()
    client.force_login(world.member)
    client.get("/api/v1/jobs/")
    settings.TRAINYARD_METRICS_TOKEN = SCRAPE_TOKEN
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {SCRAPE_TOKEN}").content.decode()
    families = list(text_string_to_metric_families(text))
    names = {sample.name for family in families for sample in family.samples}
    # Gauges described with no sample yet (the scheduler's last pass before the first)
    names |= {family.name for family in families if family.type == "gauge"}
    metrics = [one for one in vars(instruments).values() if isinstance(one, MetricWrapperBase)]
    for metric in metrics:
        for family in metric.describe():
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def test_every_rule_names_exported_metrics(exported):
    rules = yaml.safe_load((PROMETHEUS_DIR / "trainyard-alerts.yml").read_text())
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    used = {name for expr in expressions for name in OURS.findall(expr)}
    assert used and used <= exported, used - exported


def test_the_dashboard_loads_and_every_panel_names_exported_metrics(exported):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] == "Trainyard" and dashboard["uid"] == "trainyard"
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    rows = [panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"]
    assert rows == ["Cluster", "Virtual clusters", "Scheduler", "API"]
    expressions = [target["expr"] for panel in panels for target in panel["targets"]]
    expressions += [variable["query"]["query"] for variable in dashboard["templating"]["list"]
                    if isinstance(variable.get("query"), dict)]  # fmt: skip
    used = {name for expr in expressions for name in OURS.findall(expr)}
    assert len(used) >= 15
    assert used <= exported, used - exported
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
