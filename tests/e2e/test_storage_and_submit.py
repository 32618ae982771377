"""The Storage tab and the submit form's first view, end to end: headless Chromium against
a real gunicorn, Celery worker and beat (the local backend runs jobs as processes here),
with snapshots made by real scans of a real tree."""

from __future__ import annotations

import csv
import io
import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from backend.storage import actions
from backend.storage.models import StorageAccount, StorageRoot
from backend.vcs.models import Role
from tests.e2e import test_dashboard
from tests.e2e.dashboard import live_servers
from tests.factories import MembershipFactory, QuotaFactory, VirtualClusterFactory
from tests.storagemanager.trees import make_files

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
MIB = 1024 * 1024
NODES, WAIT_MS = test_dashboard.NODES, test_dashboard.WAIT_MS
# The dashboard tests' browser and windows (this module's own servers fixture).
browser = test_dashboard.browser
screenshots = test_dashboard.screenshots
open_browser = test_dashboard.open_browser


@pytest.fixture
def servers(world, host_tmp, redis_url):
    with live_servers(host_tmp, redis_url, NODES) as running:
        yield running


def test_the_storage_tab_shows_the_snapshot_its_trend_and_downloads_the_csv(
    open_browser, world, tmp_path
):
    StorageAccount.objects.create(user=world.member, uid=os.getuid())
    tree = tmp_path / "home"
    make_files(tree / "mia" / "checkpoints", 2, size=3 * MIB)
    make_files(tree / "mia" / "old-runs", 1, size=MIB, old=True)
    root = StorageRoot.objects.create(name="home", path=str(tree), expiry_days=90, warn_days=7)
    actions.scan(root)
    make_files(tree / "mia" / "checkpoints", 1, size=2 * MIB, stem="g")  # between snapshots
    latest = actions.scan(root)
    # Judged 91 days on: the files' ctime (which no test can set back) is then old enough.
    actions.run_expiry(root, dry_run=True, now=timezone.now() + timedelta(days=91))

    window = open_browser()
    page = window.page
    window.sign_in("mia")
    page.get_by_role("link", name="Storage").click()

    snapshot = page.get_by_label("Snapshot")
    expect(snapshot).to_contain_text("snapshot taken")
    taken = page.evaluate(
        "iso => new Date(iso).toLocaleString(undefined, {dateStyle: 'short', timeStyle: 'medium'})",
        latest.finished_at.isoformat(),
    )
    expect(snapshot).to_contain_text(taken)
    by_user = page.get_by_role("table", name="Usage by user")
    expect(by_user.get_by_role("row").filter(has_text="mia")).to_contain_text("+2 MiB")
    expect(page.get_by_role("table", name="Largest paths")).to_contain_text("mia/checkpoints/")
    expiring = page.get_by_role("table", name="Files that would expire")
    expect(expiring).to_contain_text("mia/old-runs/f000000")
    window.shot("storage")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    mine = [row for row in rows if row["kind"] == "user" and row["key"] == "mia"]
    assert mine and int(mine[0]["bytes"]) >= 9 * MIB
    assert {row["snapshot_at"][:19] for row in rows} == {latest.finished_at.isoformat()[:19]}


def test_the_submit_forms_first_view_submits_a_job_that_starts(open_browser, world):
    # Mia's first VC (by name) runs CPU-only work, the "platform": the form must
    # not open there asking for 1 cpu GPU, but where a job can start now.
    analytics = VirtualClusterFactory(name="analytics")
    QuotaFactory(vc=analytics, gpu_type=world.cpu, gpus=0, cpus=16, memory=64 * 1024)
    MembershipFactory(vc=analytics, user=world.member, role=Role.MEMBER)

    window = open_browser()
    page = window.page
    window.sign_in("mia")
    page.get_by_role("link", name="Submit job").first.click()
    expect(page.get_by_label("Virtual cluster")).to_have_value("vision")
    expect(page.get_by_label("GPU type")).to_have_value("A100")
    page.get_by_label("Command").fill("echo started on GPU $CUDA_VISIBLE_DEVICES")
    expect(page.get_by_text("Resources are free: this job can start now.")).to_be_visible()
    page.get_by_role("button", name="Submit job").click()

    expect(page.locator("h1 .badge")).to_have_text(re.compile("running|finished"), timeout=WAIT_MS)
    expect(page.locator("h1 .badge")).to_have_text("finished", timeout=WAIT_MS)

    page.goto("/submit")
    page.get_by_label("Virtual cluster").select_option("analytics")
    expect(page.get_by_label("GPU type")).to_have_value("cpu")
    expect(page.get_by_label("GPUs per worker")).to_have_count(0)  # a CPU-only type
