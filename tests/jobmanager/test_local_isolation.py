"""Tenants kept apart by the kernel on the local backend: every process of a job runs as its
owner's account, confined for good, and reaches nothing of another's or of the backend's.

Real processes under real accounts (ty-test-*, see tests/unix_accounts.py); the suite runs
as root, as CI does.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import stat
import subprocess
from pathlib import Path

import psutil
import pytest

from jobmanager.backends import BackendNode, DeployError, LaunchRefused, RunAs
from jobmanager.backends.confine import Confinement
from jobmanager.backends.local import JOB_PATH, LocalBackend
from tests.jobmanager.test_local_backend import ended, job_processes, launch, log_of, logged
from tests.polling import wait_until
from tests.unix_accounts import (
    JOB_PYTHON,
    JOB_PYTHONPATH,
    REPOSITORY,
    TEST_UIDS,
    job_account,
    owned_directory,
    reachable_directory,
)

PYTHON = shlex.quote(JOB_PYTHON)


def run_to_end(backend: LocalBackend, command: str, **fields) -> tuple[int | None, str]:
    job = launch(command, **fields)
    backend.deploy(job)
    report = wait_until(ended(backend, job.job_id), 20, "the job to end")
    return report.workers[0].exit_code, log_of(backend, job.job_id)


def lines_after(log: str, marker: str) -> list[str]:
    return log.split(marker, 1)[1].split()


# --- who the job is ------------------------------------------------------------------------


def test_every_process_of_a_job_runs_as_its_owner_with_no_way_back_to_root(backend):
    mia = job_account("mia")
    probe = (
        "import os; print('ids', *os.getresuid(), *os.getresgid(), *sorted(os.getgroups()));"
        "status = open('/proc/self/status').read();"
        "print('caps', *[l.split()[1] for l in status.splitlines() if l[:6] in"
        " ('CapPrm', 'CapEff', 'CapAmb')], 'nnp', status.split('NoNewPrivs:')[1].split()[0]);"
        "\ntry:\n    os.setuid(0); print('became root')"
        "\nexcept PermissionError as e: print('no', e)"
    )
    # The probe runs in a grandchild of the shell, as any process of the job would.
    code, log = run_to_end(backend, f"{PYTHON} -c {shlex.quote(probe)} | cat; id -un")

    assert code == 0, log
    ids = [int(value) for value in lines_after(log, "ids")[:6]]
    assert ids == [mia.uid] * 3 + [mia.gid] * 3
    assert lines_after(log, "caps")[:5] == ["0000000000000000"] * 3 + ["nnp", "1"]
    assert "no [Errno 1] Operation not permitted" in log and "became root" not in log
    assert log.rstrip().endswith("ty-test-mia")


def test_a_setuid_program_gives_a_job_nothing(backend, host_tmp):
    # A root-owned setuid copy of id: with no_new_privs the kernel ignores the bit.
    setuid_id = host_tmp / "setuid-id"
    setuid_id.write_bytes(Path("/usr/bin/id").read_bytes())
    setuid_id.chmod(0o4755)

    code, log = run_to_end(backend, f"{setuid_id} -u")

    assert code == 0, log
    assert log.splitlines()[-1] == str(job_account("mia").uid)


def test_supplementary_groups_are_the_owner_s_own(backend):
    mia = job_account("mia")
    extra = RunAs(mia.uid, mia.gid, (mia.gid, 61999), mia.name, mia.home)

    code, log = run_to_end(backend, "id -G", run_as=extra)

    assert code == 0, log
    assert sorted(map(int, log.splitlines()[-1].split())) == [mia.gid, 61999]


@pytest.mark.parametrize(
    ("run_as", "message"),
    [
        (None, "has no Unix account; jobs never run as root"),
        (RunAs(0, 0, (0,), "root"), "would run as root"),
        (RunAs(61000, 0, (0,), "sneaky"), "would run as root"),
    ],
)
def test_a_job_with_no_account_or_root_s_is_refused_and_nothing_runs(backend, run_as, message):
    job = launch("echo ran", run_as=run_as)

    with pytest.raises(LaunchRefused, match=message):
        backend.deploy(job)

    assert backend.reports() == {} and job_processes(job.job_id) == []


def test_the_init_keeps_none_of_the_job_s_environment_and_stays_out_of_its_reach(backend):
    job = launch(
        "echo ready; sleep 300", env={"LD_PRELOAD": "/nonexistent/evil.so", "MY_SETTING": "x"}
    )
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")
    init = psutil.Process(backend.init_pids(job.job_id)[0])
    (command,) = init.children()

    assert "LD_PRELOAD" not in init.environ() and "MY_SETTING" not in init.environ()
    assert command.environ()["MY_SETTING"] == "x"  # the job's own processes have it
    assert init.uids().real == 0 and command.uids().real == job_account("mia").uid
    # The job cannot signal its init, nor anything of root's (in a sandbox it sees none:
    # its pid 1 is its own tini).
    mine = launch(
        f"kill -TERM {init.pid}; echo kill=$?; kill -0 1; echo init=$?; "
        "echo root=$(ps -o pid= -u 0 | wc -l)"
    )
    backend.deploy(mine)
    report = wait_until(ended(backend, mine.job_id), 20, "the probe to end")
    assert report.succeeded
    probe = log_of(backend, mine.job_id)
    assert "kill=1" in probe
    assert ("root=0" if backend.sandbox else "init=1") in probe, probe
    assert init.is_running()


def test_a_job_s_path_is_the_system_s_never_the_portal_s(backend, monkeypatch):
    monkeypatch.setenv("PATH", f"/root/.private-tools:{os.environ['PATH']}")

    code, log = run_to_end(backend, 'echo "PATH=$PATH"; command -v sh')
    own_code, own_log = run_to_end(backend, 'echo "PATH=$PATH"', env={"PATH": "/opt/x:/bin"})

    assert code == 0, log
    assert lines_after(log, "PATH=")[0] == JOB_PATH
    assert JOB_PATH == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert "/root" not in log
    assert own_code == 0 and lines_after(own_log, "PATH=")[0] == "/opt/x:/bin"  # the job's own


# --- what the job may touch ------------------------------------------------------------


def test_a_job_s_directories_are_its_owner_s_and_the_backend_s_files_root_s(backend):
    mia = job_account("mia")
    job = launch("echo ready; sleep 300")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")

    def owner_and_mode(path: Path) -> tuple[int, int]:
        info = path.lstat()
        return info.st_uid, stat.S_IMODE(info.st_mode)

    job_dir = backend.state_dir / job.job_id
    assert owner_and_mode(job_dir / "work") == (mia.uid, 0o700)
    assert owner_and_mode(backend.log_dir / job.job_id) == (mia.uid, 0o700)
    assert owner_and_mode(backend.log_dir / job.job_id / "worker-0.log") == (mia.uid, 0o600)
    assert owner_and_mode(job_dir) == (0, 0o711)
    assert owner_and_mode(backend.state_dir) == (0, 0o711)
    for private in ("state.json", "a1-worker-0.confinement.json"):
        assert owner_and_mode(job_dir / private) == (0, 0o600)
    locks = list(backend.state_dir.glob(".lock*"))  # the jobs' lock stripes (and devices')
    assert locks and {owner_and_mode(lock) for lock in locks} == {(0, 0o600)}


def test_one_tenant_s_job_reaches_nothing_of_another_s(backend):
    alice = launch("echo secret > mine.txt; echo ready; exec sleep 300", owner="alice")
    backend.deploy(alice)
    wait_until(logged(backend, alice.job_id, "ready"), 20, "alice's job to start")
    (sleeper,) = [p for p in job_processes(alice.job_id) if p.name() == "sleep"]
    work, logs = backend.state_dir / alice.job_id / "work", backend.log_dir / alice.job_id
    attempts = {
        "read her log": f"cat {logs}/worker-0.log",
        "list her logs": f"ls {logs}",
        "read her files": f"cat {work}/mine.txt",
        "write her files": f"echo bob > {work}/bob.txt",
        "read the backend's state": f"cat {backend.state_dir}/{alice.job_id}/state.json",
        "list the backend's jobs": f"ls {backend.state_dir}",
        "take the backend's lock": f"{PYTHON} -c 'open(\"{backend.state_dir}/.lock\")'",
        "signal her worker": f"kill -TERM {sleeper.pid}",
        "read her environment": f"cat /proc/{sleeper.pid}/environ",
    }
    probe = "; ".join(
        f"{cmd} >/dev/null 2>&1; echo {i}=$?" for i, cmd in enumerate(attempts.values())
    )

    code, log = run_to_end(backend, probe, owner="bob")

    assert code == 0, log
    results = dict(line.split("=") for line in log.splitlines() if line[:1].isdigit())
    succeeded = [what for i, what in enumerate(attempts) if results[str(i)] == "0"]
    assert succeeded == []
    assert sleeper.is_running()
    assert not (work / "bob.txt").exists()


def test_a_link_a_job_leaves_in_place_of_its_log_is_never_followed(backend, host_tmp):
    precious = host_tmp / "precious"
    precious.write_text("root's\n")
    job_id = "linker1"
    logs = backend.log_dir / job_id
    backend.deploy(
        launch(f"cd {logs} && rm worker-0.log && ln -s {precious} worker-0.log", job_id=job_id)
    )
    wait_until(ended(backend, job_id), 20, "the first attempt to end")
    assert (logs / "worker-0.log").is_symlink()

    with pytest.raises(DeployError, match="worker 0"):
        backend.deploy(launch("echo again", job_id=job_id, attempt=2))

    assert precious.read_text() == "root's\n"
    assert job_processes(job_id) == []


def test_a_bare_job_s_memory_is_capped_where_no_cgroup_limits_it(bare_backend):
    # The sandbox's memory cgroup: test_local_sandbox's memory hog.
    allocate = f"{PYTHON} -c 'bytearray(2 * 1024**3); print(\"allocated\")'"
    job = launch(allocate)  # its worker has 1024 MiB

    bare_backend.deploy(job)
    report = wait_until(ended(bare_backend, job.job_id), 20, "the job to end")

    assert report.workers[0].exit_code == 1
    assert "MemoryError" in log_of(bare_backend, job.job_id)
    assert "allocated" not in log_of(bare_backend, job.job_id)


# --- GPUs ---------------------------------------------------------------------------------


def test_a_worker_opens_its_own_gpus_and_no_other(host_tmp):
    # Character devices stand in for /dev/nvidiaN (those of /dev/null, zero, full and
    # random): the kernel checks them the same way, and a sandbox makes and allows them by
    # their numbers as it does a GPU's.
    devices = host_tmp / "dev"
    devices.mkdir()
    devices.chmod(0o755)  # as /dev is
    for index, stand_in in enumerate(("null", "zero", "full", "random")):
        number = os.stat(f"/dev/{stand_in}").st_rdev
        os.mknod(devices / f"nvidia{index}", 0o666 | stat.S_IFCHR, number)
        (devices / f"nvidia{index}").chmod(0o666)
    gpu_node = BackendNode("gpu-0", "A100", 4, 8000, 16384)  # real GPUs: not declared
    backend = LocalBackend(
        host_tmp / "state", host_tmp / "logs", [gpu_node], cgroup_root=None, device_dir=devices
    )
    where = "/dev" if backend.sandbox else devices  # a sandbox has its GPUs where CUDA looks
    probe = "; ".join(
        f"(true < {where}/nvidia{i}) 2>/dev/null && echo gpu{i}=opened || echo gpu{i}=refused"
        for i in range(4)
    )
    job = launch(probe + "; sleep 300", node="gpu-0", gpus=2)  # GPUs 0 and 1
    mia = job_account("mia")

    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "gpu3="), 20, "the probe")

    log = log_of(backend, job.job_id)
    assert [line for line in log.splitlines() if line.startswith("gpu")] == [
        "gpu0=opened",
        "gpu1=opened",
        "gpu2=refused",
        "gpu3=refused",
    ]
    assert [(devices / f"nvidia{i}").stat().st_uid for i in (0, 1)] == [mia.uid, mia.uid]
    backend.remove(job.job_id)
    for index in (0, 1):
        info = (devices / f"nvidia{index}").stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)


# --- sessions join the job's confinement -------------------------------------------------

SESSION = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("confine", sys.argv[1])
confine = importlib.util.module_from_spec(spec)
sys.modules["confine"] = confine
spec.loader.exec_module(confine)
confinement = confine.Confinement.from_json(json.loads(sys.argv[2]))
confine.enter(confinement)
os.execvpe("sh", ["sh", "-c", "id -u; pwd; echo $MY_SETTING; ulimit -d"], confinement.env)
"""


def test_a_session_enters_a_running_worker_as_its_owner_with_its_directory_env_and_limits(
    bare_backend,
):
    # What the SSH gateway does for bare processes: the recorded confinement, entered with
    # the same primitive (into a sandbox it is runc exec: test_local_sandbox's sessions).
    backend = bare_backend
    job = launch("echo ready; sleep 300", env={"MY_SETTING": "from-the-job"})
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")
    confinement = backend.session_confinement(job.job_id, rank=0)
    assert isinstance(confinement, Confinement)

    session = subprocess.run(
        [JOB_PYTHON, "-c", SESSION, str(REPOSITORY / "jobmanager/backends/confine.py"),
         json.dumps(confinement.to_json())],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip

    assert session.returncode == 0, session.stderr
    uid, directory, setting, memory_kib = session.stdout.split()
    assert int(uid) == job_account("mia").uid
    assert directory == str(backend.state_dir / job.job_id / "work")
    assert setting == "from-the-job" and int(memory_kib) == 1024 * 1024
    assert backend.session_confinement(job.job_id, rank=1) is None


# --- single-user mode ------------------------------------------------------------------

SINGLE_USER = """
import json, sys, time
from jobmanager.backends import JobLaunch, RunAs, WorkerSpec
from jobmanager.backends.local import JOB_PATH, LocalBackend

directory, other_uid = sys.argv[1], int(sys.argv[2])
backend = LocalBackend(directory + "/state", directory + "/logs", nodes="local-0:A100:8",
                       cgroup_root=None)
someone_else = RunAs(other_uid, other_uid, (other_uid,), "someone-else")
job = JobLaunch("single1", 1, "n", "bob", "vision", "id -u",
                (WorkerSpec(0, "local-0", (0,), 1000, 1024),), run_as=someone_else)
backend.deploy(job)
while not backend.reports()["single1"].ended:
    time.sleep(0.05)
print(json.dumps({"code": backend.reports()["single1"].workers[0].exit_code,
                  "log": open(directory + "/logs/single1/worker-0.log").read(),
                  "run_as": backend.isolation(job).run_as}))
backend.remove("single1")
"""


def test_a_backend_that_is_not_root_runs_every_job_as_itself():
    portal = job_account("portal")
    with reachable_directory() as directory:
        os.chown(directory, portal.uid, portal.gid)
        result = subprocess.run(
            ["setpriv", f"--reuid={portal.uid}", f"--regid={portal.gid}", "--init-groups",
             JOB_PYTHON, "-c", SINGLE_USER, str(directory), str(job_account("bob").uid)],
            cwd=REPOSITORY, capture_output=True, text=True, timeout=60,
            env={"PATH": os.environ["PATH"], "HOME": portal.home, "PYTHONPATH": JOB_PYTHONPATH},
        )  # fmt: skip

    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["code"] == 0
    assert answer["log"].splitlines()[-1] == str(portal.uid)
    assert answer["run_as"] == (
        f"ty-test-portal (uid {portal.uid}, gid {portal.gid}), the portal's own account "
        "(single-user mode)"
    )
    assert pwd.getpwuid(portal.uid).pw_uid in TEST_UIDS


def test_an_owned_working_directory_of_someone_else_is_denied_by_the_kernel(backend, host_tmp):
    # A path that passed every check and then changed: the job's uid still decides.
    theirs = owned_directory(host_tmp / "alice-data", job_account("alice"))

    code, log = run_to_end(backend, "pwd", working_dir=str(theirs))

    assert code == 127
    assert f"ty-test-mia cannot enter the working directory {theirs}: Permission denied" in log
