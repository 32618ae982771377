"""The dashboard live: its build, a real gunicorn + Celery worker + beat on the local
backend, and headless Debian Chromium driven by Playwright (shared by the e2e tests and
bench/dashboard_load)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from tests import servers
from tests.servers import (
    ROOT,
    kill_process_group,
    start_celery,
    start_gunicorn,
)

CHROMIUM = os.environ.get("TRAINYARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
PASSWORD = "dashboard-e2e-password"


def build_dashboard() -> None:
    """`make frontend`: npm ci and a Vite build, each only when its inputs changed."""
    if shutil.which("npm") is None or not Path(CHROMIUM).exists():
        raise RuntimeError(
            "The dashboard tests need Node.js and Chromium: run `make test`, which installs them."
        )
    # The build is the project's, readable by every account (the suite runs with umask 077).
    subprocess.run(["make", "-s", "frontend"], cwd=ROOT, check=True, umask=0o022)


def set_password(user: object, password: str = PASSWORD) -> None:
    """A hash the servers verify quickly (the tests' MD5 hasher is set in this process only)."""
    user.password = PBKDF2PasswordHasher().encode(password, "e2esalt", iterations=1000)  # type: ignore[attr-defined]
    user.save(update_fields=["password"])  # type: ignore[attr-defined]


@dataclass
class LiveServers:
    base_url: str
    env: dict[str, str]
    processes: list[subprocess.Popen] = field(default_factory=list)


def live_env(directory: Path, redis_url: str, nodes: str) -> dict[str, str]:
    return servers.live_env(directory, redis_url, "e2e") | {
        "TRAINYARD_BACKEND": "local",
        "TRAINYARD_LOCAL_NODES": nodes,
        "TRAINYARD_LOCAL_CGROUP_ROOT": "",
        "TRAINYARD_LOCAL_KILL_AFTER_SECONDS": "1",
        "TRAINYARD_LOCAL_STATE_DIR": str(directory / "local-backend"),
        "TRAINYARD_JOB_MANAGER_INTERVAL": "1",
        "TRAINYARD_STOP_GRACE_SECONDS": "2",
        "TRAINYARD_TOKEN_CACHE_SECONDS": "0",
    }


@contextmanager
def live_servers(
    directory: Path,
    redis_url: str,
    nodes: str,
    job_manager: bool = True,
    extra_env: dict[str, str] | None = None,
) -> Iterator[LiveServers]:
    """gunicorn (2 workers x 4 threads: a page loads several resources at once) and, unless
    told otherwise, a Celery worker and beat running the job manager every second;
    ``extra_env`` adds to (or overrides) their environment."""
    env = live_env(directory, redis_url, nodes) | (extra_env or {})
    web, base_url = start_gunicorn(extra_env=env, workers=2, threads=4)
    servers = LiveServers(base_url, env, [web])
    try:
        if job_manager:
            worker_options = [
                "--concurrency", "2", "--hostname", f"e2e-{uuid.uuid4().hex[:6]}@%h",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
            ]  # fmt: skip
            servers.processes.append(start_celery(env, "worker", *worker_options))
            servers.processes.append(
                start_celery(env, "beat", "--schedule", str(directory / "celerybeat-schedule"))
            )
        yield servers
    finally:
        for process in servers.processes:
            kill_process_group(process)
        kill_jobs_started_under(directory)


def kill_jobs_started_under(directory: Path) -> None:
    """After a failed test, leave no job behind: the local backend's processes run detached
    from the servers, and are found by the state and log folders named on their command line."""
    for process in psutil.process_iter(["cmdline"]):
        if any(str(directory) in part for part in process.info["cmdline"] or []):
            for child in process.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


@contextmanager
def chromium() -> Iterator[object]:
    """Headless Debian Chromium. Playwright's sync API runs an event loop in this thread,
    which Django takes for async code: the tests' own ORM calls are allowed meanwhile."""
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            if previous is None:
                os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
