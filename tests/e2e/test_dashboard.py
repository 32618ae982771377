"""The dashboard end to end: headless Chromium against a real gunicorn, Celery worker and
beat, with the local backend running every job as real processes on this host.

Every page is photographed on the way into TRAINYARD_SCREENSHOT_DIR (`make screenshots`
sets docs/screenshots; otherwise a temporary folder). No sleeps: Playwright's `expect`
waits for what a user would see, up to its timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.dashboard import PASSWORD, build_dashboard, chromium, live_servers, set_password

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

NODES = ",".join([*(f"a100-{index}:A100:8" for index in range(1, 5)), "cpu-1:cpu:0", "cpu-2:cpu:0"])
WAIT_MS = 60_000  # a job's start and end pass through the job manager every second
LAPTOP = {"width": 1366, "height": 800}


@pytest.fixture(scope="module")
def browser():
    build_dashboard()
    with chromium() as running:
        yield running


@pytest.fixture
def servers(world, host_tmp, redis_url):
    """Fresh servers for each test, started after its data is in and stopped before the
    data is flushed, so that no job manager pass of one test lands in the next."""
    with live_servers(host_tmp, redis_url, NODES) as running:
        yield running


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    configured = os.environ.get("TRAINYARD_SCREENSHOT_DIR")
    directory = Path(configured) if configured else tmp_path_factory.mktemp("screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class Browsing:
    """One signed-out browser window, recording what would show in its console."""

    def __init__(self, browser, base_url: str, screenshots: Path, viewport=LAPTOP) -> None:
        self.context = browser.new_context(base_url=base_url, viewport=viewport)
        self.context.set_default_timeout(20_000)
        self.page: Page = self.context.new_page()
        self.screenshots = screenshots
        self.problems: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on(
            "console",
            lambda message: (
                message.type == "error"
                and not message.text.startswith("Failed to load resource")
                and self.problems.append(f"console: {message.text}")
            ),
        )
        self.page.on(
            "response",
            lambda response: (
                response.status >= 500
                and self.problems.append(f"{response.status} from {response.url}")
            ),
        )

    def sign_in(self, username: str) -> None:
        self.page.goto("/login")
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(PASSWORD)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.screenshots / f"{name}.png"), full_page=True)


@pytest.fixture
def open_browser(browser, servers, screenshots, world) -> Iterator:
    for user in (world.member, world.vc_admin, world.outsider, world.staff):
        set_password(user)
    windows: list[Browsing] = []

    def open_window(**options) -> Browsing:
        window = Browsing(browser, servers.base_url, screenshots, **options)
        windows.append(window)
        return window

    yield open_window
    for window in windows:
        window.context.close()
    assert [problem for window in windows for problem in window.problems] == []


def test_a_member_signs_in_submits_a_job_that_runs_and_finishes_and_reads_its_log(
    open_browser, world
):
    world.vision.notification = "Maintenance on Saturday 08:00-10:00 UTC: save checkpoints."
    world.vision.save()
    window = open_browser()
    page = window.page
    page.goto("/jobs")  # signed out: sent to sign in, and back here afterwards
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fjobs$"))
    window.shot("login")
    window.sign_in("mia")
    expect(page.get_by_role("note", name="Notification of VC vision")).to_contain_text(
        "Maintenance on Saturday"
    )

    page.get_by_role("link", name="Submit job").first.click()
    expect(page.get_by_text("at most 7d 0h")).to_be_visible()
    page.get_by_label("Name").fill("hello-dashboard")
    page.get_by_label("Command").fill("echo hello from the dashboard on GPU $CUDA_VISIBLE_DEVICES")
    page.get_by_label("Environment").fill("EPOCHS=1")
    page.get_by_role("button", name=re.compile(r"^1 GPU · 8 CPU")).click()
    expect(page.get_by_text("Resources are free: this job can start now.")).to_be_visible()
    window.shot("submit")
    page.get_by_role("button", name="Submit job").click()

    expect(page.get_by_role("heading", name=re.compile("hello-dashboard"))).to_be_visible()
    expect(page.locator("h1 .badge")).to_have_text("finished", timeout=WAIT_MS)
    log = page.get_by_label("Log", exact=True)
    expect(log).to_contain_text("hello from the dashboard on GPU 0", timeout=WAIT_MS)
    expect(page.get_by_label("Status history")).to_contain_text("running")
    window.shot("job-detail")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download full log").click()
    text = Path(download.value.path()).read_text()
    assert "hello from the dashboard on GPU 0" in text and "=== attempt 1 on a100-" in text

    page.get_by_role("link", name="Clone").click()
    expect(page.get_by_label("Command")).to_have_value(
        "echo hello from the dashboard on GPU $CUDA_VISIBLE_DEVICES"
    )
    expect(page.get_by_label("Environment")).to_have_value("EPOCHS=1")

    page.get_by_role("link", name="Jobs", exact=True).click()
    row = page.get_by_role("row").filter(has_text="hello-dashboard")
    expect(row.locator(".badge")).to_have_text("finished")


def test_a_job_beyond_the_quota_waits_and_says_why_then_two_jobs_are_killed_at_once(
    open_browser, world
):
    window = open_browser()
    page = window.page
    window.sign_in("mia")

    # The first job holds all 16 A100 GPUs of VC vision's quota.
    submit(page, "holder", "echo holding; sleep 300", workers="2", gpus="8")
    expect(page.locator("h1 .badge")).to_have_text("running", timeout=WAIT_MS)

    # Three whole nodes cannot be had while two of four are held: the form warns before
    # the job is sent, and the job says why it waits once it is.
    page.goto("/submit")
    # With vision's A100 quota all used, the form opens on its CPU-only type, where a job
    # can start now; this one wants A100 nodes.
    expect(page.get_by_label("GPU type")).to_have_value("cpu")
    page.get_by_label("GPU type").select_option("A100")
    page.get_by_label("Name").fill("waiter")
    page.get_by_label("Workers", exact=True).fill("3")
    page.get_by_label("GPUs per worker").fill("8")
    page.get_by_text("Preemptible").check()
    page.get_by_label("Command").fill("echo my turn")
    warning = page.get_by_role("status").filter(has_text="This job cannot start now")
    expect(warning).to_contain_text("needs 3")
    expect(warning).to_contain_text(
        "on separate nodes; largest free block is 8"
    )  # the server's words
    window.shot("submit-warning")
    page.get_by_role("button", name="Submit job").click()
    expect(page.get_by_role("heading", name=re.compile("waiter"))).to_be_visible()
    expect(page.locator("h1 .badge")).to_have_text("queued")
    expect(page.locator(".messages")).to_contain_text("needs 3", timeout=WAIT_MS)

    page.get_by_role("link", name="VC vision").click()
    queue = page.get_by_role("table", name="Queue")
    expect(queue.get_by_role("row").nth(1)).to_contain_text("waiter")
    expect(queue).to_contain_text("needs 3")
    expect(page.get_by_role("img", name="16 of 16 used")).to_be_visible()
    window.shot("vc")
    page.get_by_role("link", name="Cluster", exact=True).click()
    expect(page.get_by_role("table", name="GPU types")).to_contain_text("A100")
    expect(page.get_by_role("table", name="Per-VC usage")).to_contain_text("vision")
    expect(page.get_by_role("table", name="Nodes")).to_contain_text("cpu-2")
    window.shot("cluster")

    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_role("checkbox", name=re.compile("Select job")).first.wait_for()
    for name in ("holder", "waiter"):
        page.get_by_role("row").filter(has_text=name).get_by_role("checkbox").check()
    expect(page.get_by_text("2 selected")).to_be_visible()
    holder = page.get_by_role("row").filter(has_text="holder")
    expect(holder.get_by_role("cell").last).to_have_text(re.compile(r"^6d 23h$"))  # time left
    window.shot("jobs")
    page.get_by_role("button", name="Kill").click()
    results = page.get_by_role("status", name="Results")
    expect(results.locator("li.ok")).to_have_count(2)
    expect(results).to_contain_text("ok, now")
    for name in ("holder", "waiter"):
        badge = page.get_by_role("row").filter(has_text=name).locator(".badge")
        expect(badge).to_have_text("killed", timeout=WAIT_MS)


def submit(page: Page, name: str, command: str, workers: str = "1", gpus: str = "1") -> None:
    page.goto("/submit")
    page.get_by_label("Name").fill(name)
    page.get_by_label("Workers", exact=True).fill(workers)
    page.get_by_label("GPUs per worker").fill(gpus)
    page.get_by_label("Command").fill(command)
    # As a user would, click once the form has settled: the VC's limits are in and the
    # server has judged this very form (the button does not move under the pointer).
    expect(page.get_by_text("at most 7d 0h")).to_be_visible()
    availability = page.get_by_role("complementary", name="Availability")
    answered = availability.get_by_role("status").and_(availability.locator(".ok, .warning"))
    expect(answered).to_be_visible()
    page.get_by_role("button", name="Submit job").click()
    expect(page.get_by_role("heading", name=re.compile(name))).to_be_visible()


def test_a_vc_admin_sets_policy_and_max_time_and_a_member_sees_the_new_cap(open_browser, world):
    admin = open_browser()
    admin.sign_in("vera")
    admin.page.get_by_role("link", name="VC vision").click()
    admin.page.get_by_role("link", name="Settings").click()
    expect(admin.page).to_have_url(re.compile("/vcs/vision/settings$"))
    admin.page.get_by_label("Scheduling policy").select_option("RF")
    hours = admin.page.get_by_label("Max job time (hours)")
    hours.fill("0")
    admin.page.get_by_role("button", name="Save settings").click()
    expect(admin.page.locator(".field", has=hours)).to_contain_text("greater than or equal to 60")
    hours.fill("2")
    admin.page.get_by_role("button", name="Save settings").click()
    expect(admin.page.get_by_text("Saved: policy RF, jobs run at most 2h 00m.")).to_be_visible()
    admin.shot("vc-settings")

    member = open_browser()
    member.sign_in("mia")
    page = member.page
    page.get_by_role("link", name="Submit job").first.click()
    expect(page.get_by_text("at most 2h 00m (120 min) in VC vision")).to_be_visible()
    expect(page.get_by_label("Wall time (minutes)")).to_have_attribute("max", "120")
    page.get_by_label("Command").fill("python train.py")
    page.get_by_label("Wall time (minutes)").fill("180")
    page.get_by_role("button", name="Submit job").click()
    wall = page.locator(".field", has=page.get_by_label("Wall time (minutes)"))
    # The server's answer: under load (SQLite, a job manager pass every second) it can
    # take longer than expect's default 5 s.
    expect(wall.locator(".field-error")).to_be_visible(timeout=WAIT_MS)

    # A member gets no settings tab and no quota page, and the API refuses them too.
    page.get_by_role("link", name="VC vision").click()
    expect(page.get_by_role("table", name="Quota and use")).to_be_visible()
    expect(page.get_by_role("link", name="Settings")).to_have_count(0)
    expect(page.get_by_role("link", name="Quotas")).to_have_count(0)
    page.goto("/vcs/vision/settings")
    expect(page.get_by_role("alert")).to_contain_text("Only admins of VC vision")
    expect(page.get_by_role("form", name="VC settings")).to_have_count(0)
    page.goto("/quotas")
    expect(page.get_by_role("alert")).to_contain_text("Only cluster admins")
    status = page.evaluate(
        """async () => (await fetch('/api/v1/vcs/vision/quotas/', {method: 'PUT',
             headers: {'Content-Type': 'application/json', 'X-CSRFToken':
               document.cookie.match(/csrftoken=([^;]+)/)[1]},
             body: JSON.stringify([{gpu_type: 'A100', gpus: 999}])})).status"""
    )
    assert status == 403
    world.vision.refresh_from_db()
    assert (world.vision.policy, world.vision.max_wall_time) == ("RF", 7200)

    staff = open_browser(viewport={"width": 1920, "height": 1080})
    staff.sign_in("root")
    staff.page.get_by_role("link", name="Quotas").click()
    expect(staff.page.get_by_label("vision A100 GPUs")).to_have_value("16")
    staff.page.get_by_label("nlp A100 GPUs").fill("12")
    staff.page.get_by_role("button", name="Save nlp").click()
    expect(staff.page.get_by_role("row").filter(has_text="nlp")).to_contain_text("Saved.")
    assert world.nlp.quotas.get(gpu_type=world.a100).gpus == 12
    staff.shot("quotas")


def test_ssh_key_and_allowed_ip_pages_reject_bad_input_with_a_clear_message(open_browser, tmp_path):
    window = open_browser()
    page = window.page
    window.sign_in("mia")

    page.get_by_role("link", name="My SSH keys").click()
    expect(page.get_by_text("No SSH key yet")).to_be_visible()
    page.get_by_label("Public key").fill("ssh-rsa this-is-not-a-key mia@laptop")
    page.get_by_role("button", name="Add key").click()
    field = page.locator(".field", has=page.get_by_label("Public key"))
    expect(field.locator(".field-error")).to_be_visible()
    expect(page.get_by_role("table", name="SSH keys")).to_have_count(0)
    key_file = tmp_path / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mia@laptop", "-f", str(key_file)],
        check=True,
    )
    page.get_by_label("Name").fill("laptop")
    page.get_by_label("Public key").fill(Path(f"{key_file}.pub").read_text())
    page.get_by_role("button", name="Add key").click()
    expect(page.get_by_role("table", name="SSH keys")).to_contain_text("SHA256:")
    expect(page.get_by_role("table", name="SSH keys")).to_contain_text("laptop")
    window.shot("ssh-keys")

    page.get_by_role("link", name="My allowed IPs").click()
    page.get_by_label("Address or network").fill("999.1.1.1")
    page.get_by_role("button", name="Add address").click()
    field = page.locator(".field", has=page.get_by_label("Address or network"))
    expect(field.locator(".field-error")).to_contain_text("not an IP address")
    page.get_by_label("Address or network").fill("0.0.0.0/0")
    page.get_by_role("button", name="Add address").click()
    expect(field.locator(".field-error")).to_contain_text("/16")
    page.get_by_label("Address or network").fill("203.0.113.0/24")
    page.get_by_label("Description").fill("office")
    page.get_by_role("button", name="Add address").click()
    table = page.get_by_role("table", name="Allowed IPs")
    expect(table).to_contain_text("203.0.113.0/24")
    expect(table.get_by_role("row").nth(1).get_by_role("cell").nth(3)).not_to_have_text("never")
    window.shot("allowed-ips")


def test_an_unknown_page_and_a_missing_job_are_said_plainly(open_browser):
    window = open_browser()
    window.sign_in("mia")
    page = window.page

    answer = page.goto("/no/such/page")

    assert answer is not None and answer.status == 404
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    page.get_by_role("link", name="your jobs").click()
    expect(page).to_have_url(re.compile("/jobs$"))
    page.goto("/jobs/nosuchjob1")
    expect(page.get_by_role("heading", name="No job nosuchjob1")).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_text("No Job matches the given query.")).to_have_count(0)
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)
