"""The README's ``make run`` block, run as written by root in a terminal of its own: the
banner gives the URL and the demo logins, they sign in, a job runs, and Ctrl-C stops the
portal (not the job) saying how many jobs keep running and that ``make stop-jobs`` stops
them, which it then does. Nothing the block started is left behind.

On this checkout as it is installed (``make run`` installs and builds what is out of date
first: the test wants those done, as ``make test`` leaves them); a terminal's Ctrl-C is a
SIGINT to its foreground process group, here the block's own. The environment moves only
what a second system on this host must not share with others (the ports, ``var/``) and
names its accounts as the tests' (tests/unix_accounts.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.backend.operations.test_run_trainyard import signed_in
from tests.docs_examples import ROOT, Example, shell_examples
from tests.polling import wait_until
from tests.servers import free_port
from tests.unix_accounts import TEST_ACCOUNT_ENV, require_root

pytestmark = pytest.mark.integration

BANNER = re.compile(r"Trainyard is running at (?P<url>http://\S+)/\n")
LOGIN = re.compile(r"^\s+(\w+)\s+/\s+(\S+)", re.M)
LEFT_RUNNING = "1 job keeps running: the next make run adopts it. To stop it too: make stop-jobs."
# What make would do first on a checkout not yet installed or built (pip, npm, Vite).
BUILT = (".venv/.installed", "frontend/dist/index.html")


def readme_block() -> Example:
    (block,) = [e for e in shell_examples("README.md") if e.check == "make-run"]
    return block


@pytest.fixture
def make_env(host_tmp) -> dict[str, str]:
    """Root's environment as a terminal has it, with ports and a var/ of this test's."""
    require_root()
    stale = subprocess.run(["make", "--question", *BUILT], cwd=ROOT, capture_output=True)
    if stale.returncode != 0:
        pytest.skip(f"make run would install or build first: run `make {' '.join(BUILT)}`")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return env | TEST_ACCOUNT_ENV | {
        "TRAINYARD_VAR_DIR": str(host_tmp / "var"),
        "TRAINYARD_PORT": str(free_port()),
        "TRAINYARD_HEALTH_BIND": f"127.0.0.1:{free_port()}",
        "TRAINYARD_SSH_PORT": str(free_port()),
        "TRAINYARD_ENDPOINTS_PORT": str(free_port()),
        "TRAINYARD_STOP_GRACE_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
    }  # fmt: skip


@contextlib.contextmanager
def terminal(block: Example, env: dict[str, str], output: Path) -> Iterator[subprocess.Popen]:
    """The block in bash, in a session (and process group) of its own; at the end every
    process left in the group, or naming the test's var/, is killed."""
    with output.open("w") as sink:
        shell = subprocess.Popen(
            ["bash", "-c", f"set -e\n{block.body}"], cwd=ROOT, env=env,
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield shell
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
        for leftover in started_under(env["TRAINYARD_VAR_DIR"]):
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()


def started_under(var_dir: str) -> list[psutil.Process]:
    """The processes whose command line names ``var_dir`` (jobs' inits, the embedded Redis)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(var_dir in part for part in process.info["cmdline"] or []):
            found.append(process)
    return found


def group_is_empty(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return True
    return False


def test_make_run_as_the_readme_shows_then_ctrl_c_says_what_keeps_running(make_env, host_tmp):
    output = host_tmp / "terminal.log"
    with terminal(readme_block(), make_env, output) as shell:

        def banner_shown() -> bool:
            assert shell.poll() is None, f"make run exited:\n{output.read_text()[-3000:]}"
            return "Press Ctrl-C to stop." in output.read_text()

        wait_until(banner_shown, 90, "make run's banner")
        banner = output.read_text()
        url = BANNER.search(banner)
        assert url, banner
        logins = dict(LOGIN.findall(banner[url.end() :]))
        assert set(logins) == {"admin", "alice", "bob", "carol"}, banner

        alice = signed_in(url["url"], "alice", logins["alice"])
        jobs = f"{url['url']}/api/v1/jobs/"
        spec = {"vc": "vision", "gpu_type": "A100", "command": "sleep 600"}
        submitted = alice.post(jobs, json=spec, timeout=10)
        assert submitted.status_code == 201, submitted.text
        job = f"{jobs}{submitted.json()['id']}/"
        wait_until(
            lambda: alice.get(job, timeout=10).json()["status"] == "running", 60, "the job to run"
        )
        assert started_under(make_env["TRAINYARD_VAR_DIR"])  # the job's processes, Redis

        os.killpg(shell.pid, signal.SIGINT)  # Ctrl-C
        shell.wait(timeout=60)
        said = output.read_text()[len(banner) :]
        assert LEFT_RUNNING in said, said
        assert group_is_empty(shell.pid), "Ctrl-C left a server of make run's running"

        stopping = subprocess.run(
            ["make", "stop-jobs"], cwd=ROOT, env=make_env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert stopping.returncode == 0, stopping.stdout + stopping.stderr
        assert f"Stopping 1 job(s): {submitted.json()['id']}." in stopping.stdout
        wait_until(
            lambda: not started_under(make_env["TRAINYARD_VAR_DIR"]), 30, "the job's processes"
        )
