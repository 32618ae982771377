"""The resident spawner of local-backend inits: what it forks runs as a fresh init would,
nobody but the backend's account may ask it, a deployer that dies before ``go`` leaves
nothing running, and without it deployments start inits afresh.

The rest of the local backend's tests (tests/jobmanager/test_local_backend.py and
test_local_isolation.py) run both with and without a spawner (the ``backend`` fixture)."""

from __future__ import annotations

import os
import subprocess

import psutil
import pytest

from jobmanager.backends.local import LocalBackend
from jobmanager.backends.local_spawner import spawn
from tests.jobmanager.conftest import NODES
from tests.jobmanager.test_local_backend import ended, launch, log_of
from tests.polling import wait_until
from tests.spawner import running_spawner
from tests.unix_accounts import JOB_PYTHON, job_account


@pytest.fixture
def socket_path(host_tmp):
    return host_tmp / "spawner.sock"


def backend_on(host_tmp, socket_path) -> LocalBackend:
    return LocalBackend(
        host_tmp / "state", host_tmp / "logs", nodes=NODES, cgroup_root=None,
        kill_after_seconds=1, spawner_socket=socket_path,
    )  # fmt: skip


def init_command_line(backend: LocalBackend, job_id: str) -> str:
    (pid,) = backend.init_pids(job_id).values()
    return " ".join(psutil.Process(pid).cmdline())


def test_a_spawned_init_runs_the_job_as_its_owner_and_records_its_end(host_tmp, socket_path):
    backend = backend_on(host_tmp, socket_path)
    job = launch("id -un; sleep 30")
    with running_spawner(socket_path):
        backend.deploy(job)
        assert "local_spawner.py" in init_command_line(backend, job.job_id)
        wait_until(lambda: "ty-test-mia" in log_of(backend, job.job_id), 20, "the job's output")

    # The spawner gone, the job runs on, and is stopped as any other.
    backend.stop(job.job_id, grace_seconds=1)
    report = wait_until(ended(backend, job.job_id), 20, "the job to end")
    assert report.workers[0].exit_code == 128 + 15
    backend.remove(job.job_id)


def test_without_a_spawner_listening_inits_start_afresh(host_tmp, socket_path):
    with running_spawner(socket_path):
        pass  # gone, its socket file left behind
    assert socket_path.exists()
    backend = backend_on(host_tmp, socket_path)
    job = launch("echo ran; sleep 30")

    backend.deploy(job)

    assert "local_init.py" in init_command_line(backend, job.job_id)
    wait_until(lambda: "ran\n" in log_of(backend, job.job_id), 20, "the job's output")
    backend.remove(job.job_id)


def test_another_account_cannot_ask_the_spawner_for_anything(host_tmp, socket_path):
    mia = job_account("mia")
    ask = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "try:\n    s.connect(sys.argv[1]); print('connected')\n"
        "except PermissionError:\n    print('denied')\n"
    )
    with running_spawner(socket_path) as spawner:
        answer = subprocess.run(
            [JOB_PYTHON, "-I", "-c", ask, str(socket_path)], user=mia.uid, group=mia.gid,
            extra_groups=[], capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert answer.stdout.strip() == "denied"
        assert spawner.poll() is None
    assert os.stat(socket_path).st_mode & 0o777 == 0o600


def test_an_init_whose_deployer_dies_before_go_runs_nothing(host_tmp, socket_path):
    marker = host_tmp / "ran"
    log = host_tmp / "init.log"
    status = host_tmp / "status.json"
    init_args = ["--status-file", str(status), "--log-file", str(log), "--"]
    init_args += ["/bin/sh", "-c", f"touch {marker}"]
    go_read, go_write = os.pipe()
    with running_spawner(socket_path), open(log, "a") as log_file:
        pid = spawn(str(socket_path), init_args, str(host_tmp), go_read, log_file.fileno(), 10)
    os.close(go_read)
    init = psutil.Process(pid)
    assert init.status() != psutil.STATUS_ZOMBIE

    os.close(go_write)  # the deployer dies: its end of the pipe closes with it

    init.wait(timeout=10)  # gone, having run nothing and recorded nothing
    assert not marker.exists() and not status.exists()


def test_an_init_is_out_of_the_spawners_process_group_once_it_is_named(host_tmp, socket_path):
    """run_trainyard kills a dead spawner's process group: an init the spawner has named
    must already lead a session of its own, however soon the group is killed. Ten times,
    the group killed as soon as the pid comes back."""
    for attempt in range(10):
        status = host_tmp / f"status-{attempt}.json"
        init_args = ["--status-file", str(status), "--log-file", str(host_tmp / "init.log")]
        init_args += ["--", "/bin/true"]
        go_read, go_write = os.pipe()
        with running_spawner(socket_path), open(host_tmp / "init.log", "a") as log_file:
            pid = spawn(str(socket_path), init_args, str(host_tmp), go_read, log_file.fileno(), 10)
        # running_spawner has SIGKILLed the spawner's process group by now.
        os.close(go_read)
        init = psutil.Process(pid)
        assert init.status() != psutil.STATUS_ZOMBIE
        assert os.getsid(pid) == pid, "the init leads a session of its own"
        os.write(go_write, b"go")
        os.close(go_write)
        init.wait(timeout=10)
        assert status.exists(), "the init ran its command to the end"
