"""The local backend alone, with real processes: start, report, stop, kill, re-adopt."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from jobmanager.backends import (
    BackendNode,
    DeployError,
    JobLaunch,
    JobReport,
    WorkerSpec,
    WorkerState,
    local,
)
from jobmanager.backends.live_jobs import LIVE_DIR
from jobmanager.backends.local import LocalBackend
from jobmanager.backends.local_host import gpu_type_of, parse_declared_nodes
from tests.jobmanager.conftest import NODES
from tests.polling import wait_until
from tests.unix_accounts import job_account, owned_directory

DEADLINE_SECONDS = 20
T = TypeVar("T")


def job_processes(job_id: str) -> list[psutil.Process]:
    """Live processes started for the job: their environment names it."""
    found = []
    for process in psutil.process_iter(["environ", "status"]):
        environ = process.info.get("environ") or {}
        if environ.get("TRAINYARD_JOB_ID") == job_id and process.info["status"] != "zombie":
            found.append(process)
    return found


def launch(
    command: str,
    workers: int = 1,
    job_id: str | None = None,
    attempt: int = 1,
    node: str = "local-0",
    gpus: int = 1,
    owner: str = "mia",
    **fields,
) -> JobLaunch:
    """A launch of ``command`` owned by ``owner``, who runs it as ty-test-<owner>."""
    specs = tuple(
        WorkerSpec(rank, node, tuple(range(rank * gpus, (rank + 1) * gpus)), 1000, 1024)
        for rank in range(workers)
    )
    return JobLaunch(
        job_id=job_id or f"t{uuid.uuid4().hex[:9]}",
        attempt=attempt,
        name="test",
        owner=owner,
        vc="vision",
        command=command,
        workers=specs,
        **({"run_as": job_account(owner)} | fields),
    )


def ended(backend: LocalBackend, job_id: str) -> Callable[[], JobReport | None]:
    def check() -> JobReport | None:
        report = backend.reports().get(job_id)
        return report if report is not None and report.ended else None

    return check


def log_of(backend: LocalBackend, job_id: str, rank: int = 0) -> str:
    path = backend.log_dir / job_id / f"worker-{rank}.log"
    return path.read_text() if path.exists() else ""


def logged(backend: LocalBackend, job_id: str, text: str, rank: int = 0) -> Callable[[], bool]:
    return lambda: text in log_of(backend, job_id, rank)


# --- running and ending --------------------------------------------------------------------


def test_a_job_that_prints_and_exits_0_succeeds_with_its_output_in_the_log(backend):
    job = launch("echo hello from $TRAINYARD_JOB_ID; echo oops >&2")

    backend.deploy(job)
    report = wait_until(ended(backend, job.job_id), 20, "the job to end")

    assert report.succeeded and report.attempt == 1
    assert report.workers[0].exit_code == 0
    log = log_of(backend, job.job_id)
    assert log.startswith(f"=== attempt 1 on local-0 at {time.strftime('%Y')}")
    assert f"hello from {job.job_id}\n" in log and "oops\n" in log


def test_a_job_that_exits_3_fails_with_3(backend):
    job = launch("exit 3")

    backend.deploy(job)
    report = wait_until(ended(backend, job.job_id), 20, "the job to end")

    assert report.failed_worker is not None
    assert (report.workers[0].state, report.workers[0].exit_code) == (WorkerState.FAILED, 3)


def test_workers_get_the_distributed_environment_their_gpus_and_nothing_secret(
    backend, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", "mysql://secret")
    job = launch(
        "env | sort; pwd",
        workers=2,
        gpus=2,
        env={"MY_SETTING": "x", "RANK": "overridden by the backend"},
        data_path="/data/set",
        output_path="/out/run",
    )

    backend.deploy(job)
    report = wait_until(ended(backend, job.job_id), 20, "the job to end")

    assert report.succeeded
    envs = [dict(_env_lines(log_of(backend, job.job_id, rank))) for rank in (0, 1)]
    assert [env["RANK"] for env in envs] == ["0", "1"]
    assert [env["LOCAL_RANK"] for env in envs] == ["0", "1"]  # both on local-0
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["0,1", "2,3"]
    for env in envs:
        assert env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2"
        # The host's loopback for bare processes; the job's address in its sandbox.
        assert env["MASTER_ADDR"] == (backend.job_address(job.job_id) or "127.0.0.1")
        assert env["MASTER_PORT"] == envs[0]["MASTER_PORT"] and int(env["MASTER_PORT"]) > 0
        assert env["TRAINYARD_JOB_ID"] == job.job_id and env["TRAINYARD_ATTEMPT"] == "1"
        assert env["TRAINYARD_DATA_PATH"] == "/data/set"
        assert env["TRAINYARD_OUTPUT_PATH"] == "/out/run"
        assert env["TRAINYARD_GPUS_DECLARED"] == "1"
        assert env["PYTHONUNBUFFERED"] == "1" and env["MY_SETTING"] == "x"
        assert "DATABASE_URL" not in env
    work = backend.state_dir / job.job_id / "work"
    assert str(work) in log_of(backend, job.job_id).splitlines()


def _env_lines(log: str) -> Iterator[tuple[str, str]]:
    for line in log.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.isidentifier():
            yield name, value


def test_the_local_rank_counts_only_the_job_s_workers_on_the_same_node():
    workers = (
        WorkerSpec(0, "local-0", (0,), 1000, 1024),
        WorkerSpec(1, "local-1", (0,), 1000, 1024),
        WorkerSpec(2, "local-0", (1,), 1000, 1024),
    )
    job = JobLaunch("j1", 1, "n", "mia", "vision", "true", workers)

    envs = [local.worker_env(job, spec, 29500, declared=False) for spec in workers]

    assert [env["LOCAL_RANK"] for env in envs] == ["0", "0", "1"]
    assert [env["LOCAL_WORLD_SIZE"] for env in envs] == ["2", "1", "2"]
    assert "TRAINYARD_GPUS_DECLARED" not in envs[0]


def test_a_job_runs_in_its_own_working_directory_when_it_names_one(backend, host_tmp):
    directory = owned_directory(host_tmp / "mine", job_account("mia"))
    job = launch("pwd", working_dir=str(directory))

    backend.deploy(job)
    wait_until(ended(backend, job.job_id), 20, "the job to end")

    assert str(directory) in log_of(backend, job.job_id).splitlines()


# --- stopping -----------------------------------------------------------------------------


def test_a_stopped_job_gets_sigterm_and_reports_how_it_ended(backend):
    job = launch("trap 'echo caught TERM; exit 143' TERM; echo ready; sleep 300 & wait")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")

    backend.stop(job.job_id, grace_seconds=30)
    report = wait_until(ended(backend, job.job_id), 20, "the job to stop")

    assert report.workers[0].exit_code == 143
    assert "caught TERM" in log_of(backend, job.job_id)
    wait_until(lambda: not job_processes(job.job_id), 20, "its processes to be gone")


def test_a_grandchild_ignoring_sigterm_is_killed_once_the_command_exits(backend):
    job = launch("(trap '' TERM; echo ready; exec sleep 300) & wait")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")

    backend.stop(job.job_id, grace_seconds=30)
    report = wait_until(ended(backend, job.job_id), 20, "the job to stop")

    assert report.workers[0].exit_code == 143  # the shell died of the SIGTERM
    assert job_processes(job.job_id) == []  # the init killed the sleep before reporting


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_period(backend):
    job = launch("trap '' TERM; (sleep 300; echo never) & echo ready; wait; sleep 300")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")

    backend.stop(job.job_id, grace_seconds=1)
    assert backend.reports()[job.job_id].workers[0].state == WorkerState.RUNNING  # in grace
    # Another process (a new instance) enforces the grace period the first one recorded.
    later = LocalBackend(backend.state_dir, backend.log_dir, nodes=NODES, cgroup_root=None)
    report = wait_until(ended(later, job.job_id), 20, "the grace period to run out")

    assert report.workers[0].exit_code == 128 + signal.SIGKILL
    assert job_processes(job.job_id) == []


def test_orphans_are_adopted_and_reaped_by_the_init(backend):
    # The subshell exits at once; its sleep, orphaned, is reparented to the init (a child
    # subreaper) rather than to the host's pid 1, and reaped by it when it ends; in a
    # sandbox, to the container's pid 1 (tini, the init's child), which reaps it.
    job = launch("(sleep 1 &); echo forked; sleep 300")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "forked"), 20, "the job to start")
    init = psutil.Process(backend.init_pids(job.job_id)[0])
    # In a sandbox, tini (the container's pid 1): the init's child once `runc run
    # --detach` has handed it over and exited (under load runc may still be there).
    reaper = init if backend.sandbox is None else wait_until(lambda: _tini_of(init), 20, "tini")

    def children() -> list[tuple[list[str], str]]:
        found = []
        for child in reaper.children():
            try:
                found.append((child.cmdline(), child.status()))
            except psutil.ZombieProcess:  # ended between the listing and the look
                found.append(([], psutil.STATUS_ZOMBIE))
            except psutil.NoSuchProcess:  # ended and reaped
                pass
        return found

    wait_until(lambda: (["sleep", "1"], "sleeping") in children(), 20, "the orphan to be adopted")
    wait_until(lambda: len(children()) == 1, 20, "the orphan to end and be reaped")
    assert children()[0][1] != psutil.STATUS_ZOMBIE


def _tini_of(init: psutil.Process) -> psutil.Process | None:
    for child in init.children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.name().startswith("tini"):
                return child
    return None


def test_removing_a_running_job_leaves_no_process(backend):
    job = launch("sleep 300 & sleep 300", workers=2)
    backend.deploy(job)
    wait_until(lambda: len(job_processes(job.job_id)) >= 4, 20, "the workers to start")

    backend.remove(job.job_id)

    assert job_processes(job.job_id) == []
    assert job.job_id not in backend.reports()
    assert log_of(backend, job.job_id)  # the log stays


# --- a new backend process re-adopts ---------------------------------------------------


def test_a_new_instance_adopts_running_jobs_and_sees_those_that_died_unwatched(backend, tmp_path):
    job = launch("echo ready; sleep 300")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")

    adopter = LocalBackend(backend.state_dir, backend.log_dir, nodes=NODES, cgroup_root=None)
    assert adopter.reports()[job.job_id].workers[0].state == WorkerState.RUNNING

    os.kill(adopter.init_pids(job.job_id)[0], signal.SIGKILL)  # dies while nobody watches
    later = LocalBackend(backend.state_dir, backend.log_dir, nodes=NODES, cgroup_root=None)
    report = wait_until(ended(later, job.job_id), 20, "the death to be seen")

    assert (report.workers[0].state, report.workers[0].exit_code) == (WorkerState.FAILED, None)
    assert job_processes(job.job_id)  # its sleep lives on, orphaned, until removed
    adopter.remove(job.job_id)
    assert job_processes(job.job_id) == []


def test_a_new_version_adopts_the_jobs_of_a_state_directory_that_lists_none(backend):
    """A state directory written before jobs were listed (``.live``): the running job is
    found, and one removed afterwards is no longer reported."""
    job = launch("echo ready; sleep 300")
    backend.deploy(job)
    wait_until(logged(backend, job.job_id, "ready"), 20, "the job to start")
    shutil.rmtree(backend.state_dir / LIVE_DIR)  # as an earlier version left it

    upgraded = LocalBackend(backend.state_dir, backend.log_dir, nodes=NODES, cgroup_root=None)

    assert upgraded.reports()[job.job_id].workers[0].state == WorkerState.RUNNING
    upgraded.remove(job.job_id)
    assert job.job_id not in upgraded.reports()
    assert job.job_id not in backend.reports()


def test_jobs_that_ended_are_not_listed_and_their_working_directories_stay(backend):
    jobs = [launch("true") for _ in range(3)]
    for job in jobs:
        backend.deploy(job)
    for job in jobs:
        wait_until(ended(backend, job.job_id), 20, f"{job.job_id} to end")
    backend.remove(jobs[0].job_id)
    backend.remove(jobs[1].job_id)

    assert set(backend.reports()) == {jobs[2].job_id}
    assert (backend.state_dir / jobs[0].job_id / "work").is_dir()
    backend.remove(jobs[2].job_id)
    assert backend.reports() == {}


# --- deployment ---------------------------------------------------------------------------


def test_deploying_the_same_attempt_again_starts_nothing_new(backend):
    job = launch("echo started; sleep 300")
    backend.deploy(job)
    pids = backend.init_pids(job.job_id)

    backend.deploy(job)

    assert backend.init_pids(job.job_id) == pids
    assert log_of(backend, job.job_id).count("=== attempt 1") == 1


def test_deploying_a_new_attempt_replaces_the_old_one(backend):
    first = launch("sleep 300")
    backend.deploy(first)
    old_init = psutil.Process(backend.init_pids(first.job_id)[0])

    backend.deploy(launch("echo second; sleep 300", job_id=first.job_id, attempt=2))

    assert not old_init.is_running() or old_init.status() == psutil.STATUS_ZOMBIE
    assert backend.reports()[first.job_id].attempt == 2
    wait_until(logged(backend, first.job_id, "second"), 20, "the second attempt to run")
    assert "=== attempt 2 on local-0" in log_of(backend, first.job_id)


def test_a_deployment_failing_half_way_is_undone(backend):
    job = launch("echo started; sleep 300", workers=2)
    # The second worker's log cannot be opened: it is a directory.
    (backend.log_dir / job.job_id / "worker-1.log").mkdir(parents=True)

    with pytest.raises(DeployError, match="worker 1"):
        backend.deploy(job)

    assert job_processes(job.job_id) == []
    assert job.job_id not in backend.reports()
    assert not (backend.state_dir / job.job_id / "state.json").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"working_dir": "/no/such/dir"}, "working directory /no/such/dir does not exist"),
        ({"node": "elsewhere"}, "Node elsewhere is not one of this host's nodes"),
    ],
)
def test_a_job_that_cannot_start_is_refused_before_anything_runs(backend, fields, message):
    job = launch("sleep 300", **fields)

    with pytest.raises(DeployError, match=message):
        backend.deploy(job)

    assert backend.reports() == {} and job_processes(job.job_id) == []


def test_stopping_or_removing_an_unknown_job_does_nothing(backend):
    backend.stop("nosuchjob", 1)
    backend.remove("nosuchjob")

    assert backend.reports() == {}


# --- nodes and limits ---------------------------------------------------------------------


def test_a_declared_inventory_splits_the_host_between_its_nodes():
    nodes = parse_declared_nodes(
        "local-0:A100:8, local-1:A100:8, big:H100:4:16:65536", 12_000, 30_000
    )

    assert [(n.name, n.gpu_type, n.gpus) for n in nodes] == [
        ("local-0", "A100", 8),
        ("local-1", "A100", 8),
        ("big", "H100", 4),
    ]
    assert [(n.millicpus, n.memory) for n in nodes] == [
        (4000, 10_000),
        (4000, 10_000),
        (16_000, 65_536),
    ]
    assert all(n.declared and n.labels == {"trainyard.io/declared": "true"} for n in nodes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no node"),
        ("local-0:A100", "write name:gpu_type:gpus"),
        ("local-0:A100:8:4", "write name:gpu_type:gpus"),
        ("local-0:A100:eight", "GPUs must be a whole number, not 'eight'"),
        ("local-0:A100:-1", "GPUs must be a whole number"),
        ("local-0::8", "give the GPU type"),
        ("bad name:A100:8", "'bad name' is not a node name"),
        ("a:A100:8,a:A100:8", "'a' is declared twice"),
        ("a:A100:8:0:1024", "cpus must be a positive number, not '0'"),
        ("a:A100:8:2:lots", "memory \\(MiB\\) must be a positive number"),
    ],
)
def test_a_malformed_declared_inventory_is_refused_naming_the_entry(text, message):
    with pytest.raises(ValueError, match=message):
        parse_declared_nodes(text, 8000, 16_000)


def test_without_a_declared_inventory_the_host_is_one_node_with_its_nvml_gpus(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(local, "discover_gpus", lambda: ["NVIDIA A100-SXM4-80GB"] * 4)
    backend = LocalBackend(tmp_path / "s", tmp_path / "l", cgroup_root=None)

    (node,) = backend.nodes()

    assert (node.gpu_type, node.gpus, node.declared) == ("A100", 4, False)
    assert node.millicpus >= 1000 and node.memory > 0


def test_a_host_without_gpus_is_one_cpu_node(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "discover_gpus", lambda: [])
    backend = LocalBackend(tmp_path / "s", tmp_path / "l", cgroup_root=None)

    (node,) = backend.nodes()

    assert (node.gpu_type, node.gpus, node.declared) == ("cpu", 0, False)


def test_gpu_discovery_never_fails():
    # Without pynvml, or without a driver or GPU, NVML finds nothing rather than erring.
    assert isinstance(local.discover_gpus(), list)


@pytest.mark.parametrize(
    ("device", "gpu_type"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
    ],
)
def test_gpu_types_are_named_from_the_device_name(device, gpu_type):
    assert gpu_type_of(device) == gpu_type


def test_without_a_cgroup_v2_hierarchy_limits_are_not_enforced_and_jobs_still_run(
    tmp_path, host_tmp
):
    # Bare processes' limits (the sandbox's are cgroups of runc's).
    backend = LocalBackend(
        host_tmp / "s", host_tmp / "l", NODES, cgroup_root=tmp_path / "none" / "trainyard",
        sandbox="none",
    )  # fmt: skip
    job = launch("echo ran")

    backend.deploy(job)

    assert not backend.limits_enforced
    assert "is not a cgroup v2 hierarchy" in backend.limits_note
    assert backend.limits_in_force.startswith("setrlimit: each process's memory (RLIMIT_DATA)")
    assert backend.isolation(job).limits == backend.limits_in_force
    assert wait_until(ended(backend, job.job_id), 20, "the job to end").succeeded


def test_where_cgroups_are_delegated_each_worker_gets_its_cpu_and_memory_limits(tmp_path, host_tmp):
    hierarchy = _fake_cgroup_hierarchy(tmp_path / "cgroup")
    backend = LocalBackend(
        host_tmp / "s", host_tmp / "l", NODES, cgroup_root=hierarchy, sandbox="none"
    )  # bare processes' cgroups (the sandbox's are runc's)
    job = replace(launch("echo ran"), workers=(WorkerSpec(0, "local-0", (0,), 1500, 512),))

    backend.deploy(job)
    wait_until(ended(backend, job.job_id), 20, "the job to end")

    assert backend.limits_enforced and backend.limits_note == ""
    assert backend.limits_in_force == (
        f"cgroup v2 ({hierarchy}): cpu.max and memory.max per worker"
    )
    assert (hierarchy / "cgroup.subtree_control").read_text() == "+cpu +memory"
    (worker,) = [path for path in hierarchy.iterdir() if path.is_dir()]
    assert worker.name == f"{job.job_id}-a1-w0.scope"
    assert (worker / "cpu.max").read_text() == "150000 100000"
    assert (worker / "memory.max").read_text() == str(512 * 1024 * 1024)
    assert (worker / "cgroup.procs").read_text().strip().isdigit()  # the command joined it
    # The confinement recorded for sessions names the cgroup, and no rlimit stands in for it.
    state = json.loads((backend.state_dir / job.job_id / "state.json").read_text())
    confinement = state["workers"][0]["confinement"]
    assert (confinement["cgroup"], confinement["rlimits"]) == (str(worker), {})


def test_a_cgroup_root_without_the_cpu_and_memory_controllers_enforces_nothing(tmp_path):
    parent = tmp_path / "cgroup"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (parent / "cgroup.subtree_control").write_text("cpu pids\n")  # memory is not handed down

    backend = LocalBackend(tmp_path / "s", tmp_path / "l", NODES, cgroup_root=parent / "ty")

    assert not backend.limits_enforced
    assert backend.limits_note == f"{parent / 'ty'} is not delegated the memory controller"
    assert not (parent / "ty").exists()


def _fake_cgroup_hierarchy(parent: Path) -> Path:
    """Files shaped like a delegated cgroup v2 subtree (the sandbox has none to write)."""
    root = parent / "trainyard.slice"
    root.mkdir(parents=True)
    (parent / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("\n")
    return root


def run_init(tmp_path: Path, *command: str) -> tuple[int, str, str]:
    """Run the init as the brief documents it; its exit code, status file and log."""
    status, log = tmp_path / "status.json", tmp_path / "log"
    init = ["-m", "jobmanager.backends.local_init", "--status-file", str(status)]
    init += ["--log-file", str(log), "--", *command]
    repository = Path(__file__).parents[2]
    code = subprocess.run([sys.executable, *init], cwd=repository, timeout=DEADLINE_SECONDS)
    return code.returncode, status.read_text(), log.read_text()


def test_the_init_runs_on_its_own_and_exits_with_the_command_s_code(tmp_path):
    code, status, log = run_init(tmp_path, "/bin/sh", "-c", "echo out; kill -SEGV $$")

    assert code == 128 + signal.SIGSEGV
    assert '"exit_code": 139' in status and '"ended_at": ' in status
    assert log == "out\n"


def test_the_init_reports_a_command_it_cannot_run(tmp_path):
    code, status, log = run_init(tmp_path, "/no/such/program")

    assert code == 127 and '"exit_code": 127' in status
    assert "cannot run '/no/such/program'" in log


def test_backend_nodes_given_as_objects_are_used_as_they_are(tmp_path):
    node = BackendNode("n1", "A100", 2, 4000, 8192)

    backend = LocalBackend(tmp_path / "s", tmp_path / "l", nodes=[node], cgroup_root=None)

    assert backend.nodes() == [node]


def test_an_inventory_asked_at_every_call_is_asked_once_while_pinned(host_tmp):
    # The registered nodes are a database query: a batch of deployments (in threads)
    # asks once, and a node registered after the batch is seen by the next one.
    declared = [BackendNode("local-0", "A100", 8, 16000, 65536, declared=True)]
    asked: list[int] = []

    def inventory() -> list[BackendNode]:
        asked.append(1)
        return list(declared)

    backend = LocalBackend(host_tmp / "state", host_tmp / "logs", nodes=inventory, cgroup_root=None)
    jobs = [launch("true") for _ in range(3)]
    with backend.nodes_pinned():
        for job in jobs:
            backend.deploy(job)
    assert len(asked) == 1
    for job in jobs:
        wait_until(ended(backend, job.job_id), 20, "the job to end")
        backend.remove(job.job_id)

    declared.append(BackendNode("local-1", "A100", 8, 16000, 65536, declared=True))
    assert [node.name for node in backend.nodes()] == ["local-0", "local-1"]
    assert len(asked) == 2


def test_the_init_finds_every_descendant_with_or_without_the_kernel_s_children_files(
    monkeypatch,
):
    # A shell and its two sleeps, the shell started from a thread that stays alive (its
    # children are listed under that thread's task, not the process's first): both ways
    # of looking find all three.
    from jobmanager.backends import local_init

    started: list[subprocess.Popen] = []
    ready, checked = threading.Event(), threading.Event()

    def from_a_thread() -> None:
        started.append(subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & echo up; wait"],
                                        stdout=subprocess.PIPE))  # fmt: skip
        ready.set()
        checked.wait(DEADLINE_SECONDS)

    thread = threading.Thread(target=from_a_thread)
    thread.start()
    ready.wait(DEADLINE_SECONDS)
    tree = started[0]
    try:
        assert tree.stdout.readline() == b"up\n"  # both sleeps forked
        below = {tree.pid, *(child.pid for child in psutil.Process(tree.pid).children())}
        assert len(below) == 3
        assert local_init.descendants(os.getpid()) >= below
        monkeypatch.setattr(local_init.os.path, "exists", lambda path: False)
        assert local_init.descendants(os.getpid()) >= below
    finally:
        checked.set()
        for pid in psutil.Process(tree.pid).children():
            pid.kill()
        tree.kill()
        tree.wait()
        thread.join()
