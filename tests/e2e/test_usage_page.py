"""The Usage page end to end: headless Chromium against a real gunicorn, GPU-hours of
attempts stored in the database, the table, the charts and the CSV download."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import expect

from backend.jobs.models import JobAttempt, JobStatus
from tests.backend.jobs_support import make_job
from tests.e2e import test_dashboard
from tests.e2e.dashboard import live_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
browser = test_dashboard.browser
screenshots = test_dashboard.screenshots
open_browser = test_dashboard.open_browser
DAY = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)


@pytest.fixture
def servers(world, host_tmp, redis_url):
    with live_servers(host_tmp, redis_url, test_dashboard.NODES, job_manager=False) as running:
        yield running


def ran(world, owner, gpus: int, hours: float, start: datetime = DAY, **fields):
    job = make_job(world, owner=owner, status=JobStatus.FINISHED, gpus_per_worker=gpus, **fields)
    JobAttempt.objects.create(
        job=job, number=1, nodes=["a100-1"], started_at=start,
        ended_at=start + timedelta(hours=hours),
        gpus=[{"node": "a100-1", "gpus": list(range(gpus))}],
    )  # fmt: skip
    return job


def test_a_vc_admin_sees_the_vcs_gpu_hours_per_user_and_downloads_them(open_browser, world):
    ran(world, world.member, 4, 3)  # 12 GPU-hours on 3 November
    ran(world, world.member, 2, 1, DAY + timedelta(days=1))  # 2 on the 4th
    ran(world, world.vc_admin, 1, 5)  # 5
    ran(world, world.outsider, 8, 10, vc=world.nlp)  # another VC's: not shown

    window = open_browser()
    page = window.page
    window.sign_in("vera")
    page.get_by_role("link", name="Usage").click()
    page.get_by_label("Month").fill("2026-11")
    page.get_by_label("VC", exact=True).select_option("vision")

    table = page.get_by_role("table", name="GPU-hours per user")
    expect(table.get_by_role("row").filter(has_text="mia")).to_contain_text("mia14")
    expect(table.get_by_role("row").filter(has_text="vera")).to_contain_text("vera5")
    expect(table).not_to_contain_text("otto")
    daily = "Booked GPU-hours per day in 2026-11 by user: mia 14, vera 5"
    expect(page.get_by_role("img", name=daily)).to_be_visible()
    monthly = "Booked and idle GPU-hours per user in 2026-11"
    expect(page.get_by_role("img", name=monthly)).to_be_visible()
    window.shot("usage")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert {row["key"]: float(row["booked_gpu_hours"]) for row in rows} == {"mia": 14, "vera": 5}
