"""The local backend knows its workers' inits by their start in clock ticks since boot: a
move of the kernel's boot time (btime in /proc/stat, which moves when the clock is stepped)
no longer makes it take every running job for dead, and records of an older version (a
wall-clock start time) are still read."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from jobmanager.backends import WorkerState, process_identity
from jobmanager.backends.local import LocalBackend
from tests.jobmanager.conftest import NODES
from tests.jobmanager.test_local_backend import launch, logged
from tests.polling import wait_until
from tests.unix_accounts import require_root

# What a second backend process sees of the job, run where /proc/stat says the given btime.
REPORT = """
import sys
import psutil
from jobmanager.backends.local import LocalBackend
state_dir, log_dir, nodes, job_id = sys.argv[1:]
report = LocalBackend(state_dir, log_dir, nodes=nodes, cgroup_root=None).reports()[job_id]
print(psutil.boot_time(), report.workers[0].state.value)
"""


def with_boot_time(btime: int, directory: Path) -> list[str]:
    """A command prefix that runs what follows in a mount namespace of its own, where
    /proc/stat (what psutil and everyone reads the boot time from) says ``btime``."""
    if not shutil.which("unshare"):
        pytest.skip("needs util-linux's unshare")
    fake = directory / f"stat-{secrets.token_hex(4)}"
    lines = Path("/proc/stat").read_text().splitlines()
    fake.write_text(
        "".join(f"btime {btime}\n" if line.startswith("btime ") else f"{line}\n" for line in lines)
    )
    mount = 'mount --bind "$0" /proc/stat && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount, str(fake)]


def seen_by_another_backend(backend: LocalBackend, job_id: str, btime: int) -> tuple[float, str]:
    """The boot time and the job's state as a new backend process sees them under ``btime``."""
    command = with_boot_time(btime, backend.state_dir.parent)
    command += [sys.executable, "-c", REPORT, str(backend.state_dir), str(backend.log_dir)]
    done = subprocess.run(
        [*command, NODES, job_id], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    boot_time, state = done.stdout.split()
    return float(boot_time), state


@pytest.mark.parametrize("shift", [-3, 3600])
def test_a_running_job_is_still_running_after_the_kernel_s_boot_time_moves(backend, shift):
    require_root()  # a mount namespace of its own
    job = launch("echo ready; sleep 300")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")
    moved = int(psutil.boot_time()) + shift

    boot_time, state = seen_by_another_backend(backend, job.job_id, moved)

    assert boot_time == moved  # the move is what that process saw
    assert state == WorkerState.RUNNING.value
    assert backend.reports()[job.job_id].workers[0].state == WorkerState.RUNNING
    assert all(backend.init_pids(job.job_id).values())


def test_a_job_recorded_by_an_older_version_with_a_wall_clock_start_is_adopted(backend):
    job = launch("echo ready; sleep 300")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")
    state_file = backend.state_dir / job.job_id / "state.json"
    state = json.loads(state_file.read_text())
    for worker in state["workers"]:
        assert worker["start_ticks"] and worker["create_time"]
        del worker["start_ticks"]  # as the version before wrote it: a wall-clock start alone
    state_file.write_text(json.dumps(state))

    adopter = LocalBackend(backend.state_dir, backend.log_dir, nodes=NODES, cgroup_root=None)

    assert adopter.reports()[job.job_id].workers[0].state == WorkerState.RUNNING


def test_another_process_on_the_same_pid_is_not_the_recorded_one():
    own = psutil.Process(os.getpid())
    record = process_identity.record_of(own.pid)

    assert process_identity.is_recorded(own, record)
    assert not process_identity.is_recorded(
        own, record | {"start_ticks": record["start_ticks"] + 1}
    )
    legacy = {"create_time": record["create_time"]}
    assert process_identity.is_recorded(own, legacy)
    assert not process_identity.is_recorded(own, {"create_time": record["create_time"] + 1})
    assert not process_identity.is_recorded(own, {})


def test_start_ticks_are_read_whatever_the_process_is_named(tmp_path):
    odd = tmp_path / "a) (b c"  # the name sits in parentheses in /proc/<pid>/stat
    odd.symlink_to(shutil.which("sleep") or "/bin/sleep")
    process = subprocess.Popen([str(odd), "60"])
    try:
        ticks = process_identity.start_ticks(process.pid)
        wall = psutil.Process(process.pid).create_time() - psutil.boot_time()
    finally:
        process.kill()
        process.wait()

    assert ticks is not None
    assert abs(ticks / os.sysconf("SC_CLK_TCK") - wall) < 0.05
    assert process_identity.start_ticks(process.pid) is None  # reaped: no such process
