"""Every worker of a job in its own runc container: the real runtime, real cgroups (v1
here) and real namespaces. Each test fails with the bare processes of ``sandbox="none"``.

The backend's containers have a cgroup parent named after its state directory, and each
test's state directory is fresh: nothing here meets another run's containers or cgroups.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from jobmanager.backends import WorkerState
from jobmanager.backends.local import LocalBackend
from jobmanager.backends.sandbox import (
    available,
    container_name,
    make_runtime_dir,
    remove_abandoned_runtime_dirs,
    runtime_dir,
)
from jobmanager.retries import classify
from tests.jobmanager.conftest import NODES, remove_every_job
from tests.jobmanager.test_local_backend import ended, launch, log_of, logged
from tests.polling import wait_until
from tests.sandbox_network import claimed_subnet, private_sandbox_network
from tests.spawner import running_spawner
from tests.unix_accounts import JOB_PYTHON, JOB_PYTHONPATH, REPOSITORY, require_root

PYTHON = shlex.quote(JOB_PYTHON)
PIDS_LIMIT = 64
# Without the backend's marker in its environment, as a tenant escaping the bare backend's
# search for strays would start it.
UNMARKED = "env -u TRAINYARD_LOCAL_WORKER"


@contextlib.contextmanager
def sandboxed_backend(directory: Path, **options) -> Iterator[LocalBackend]:
    """A local backend in ``directory`` running every worker in a runc container, on a
    bridge and subnet of its own; its jobs, network and cgroups removed at the end."""
    require_root()
    if available():
        pytest.skip(f"no runc sandbox here: {available()}")
    with contextlib.ExitStack() as stack:
        if "sandbox_subnet" not in options:
            options = stack.enter_context(private_network()) | options
        backend = LocalBackend(
            directory / "state", directory / "logs", sandbox="runc",
            **({"nodes": NODES, "cgroup_root": None, "kill_after_seconds": 1} | options),
        )  # fmt: skip
        try:
            yield backend
        finally:
            remove_every_job(backend)
            assert backend.sandbox is not None and backend._network is not None
            backend._network.tear_down()


@pytest.fixture(params=["exec", "spawner"])
def sandboxed(request, host_tmp) -> Iterator[LocalBackend]:
    """A sandboxed backend (limits: 64 processes, and what each test's launch asks), its
    inits started either way."""
    socket_path = host_tmp / "spawner.sock" if request.param == "spawner" else None
    with (
        running_spawner(socket_path) if socket_path else contextlib.nullcontext(),
        sandboxed_backend(
            host_tmp, spawner_socket=socket_path, sandbox_pids_limit=PIDS_LIMIT,
            sandbox_readonly_paths=[str(REPOSITORY), *JOB_PYTHONPATH.split(":")],
        ) as backend,
    ):  # fmt: skip
        yield backend


@contextlib.contextmanager
def private_network() -> Iterator[dict[str, object]]:
    """A bridge and a /24 of 10.88.0.0/16 of the test's own (claimed while the block
    lasts: tests/sandbox_network.py), without egress."""
    with claimed_subnet() as subnet:
        yield {
            "sandbox_bridge": f"tyt{secrets.token_hex(4)}",
            "sandbox_subnet": subnet,
            "sandbox_egress_nat": False,
        }


def run_to_end(backend: LocalBackend, command: str, **fields) -> tuple[int | None, str, str]:
    """The exit code, failure reason and log of a one-worker job of ``command``."""
    job = launch(command, **fields)
    backend.deploy(job)
    report = wait_until(ended(backend, job.job_id), 20, "the job to end")
    worker = report.workers[0]
    return worker.exit_code, worker.reason, log_of(backend, job.job_id)


def test_a_job_sees_only_its_own_processes(sandboxed):
    # Issue 29's leak: alice's server has its token on its command line, and bob's job
    # read it with ps (then used it on her server).
    server = f"{PYTHON} -c 'import time; time.sleep(300)' --IdentityProvider.token=s3cr3t"
    alices = launch(f"echo STARTED; exec {server}", owner="alice")
    sandboxed.deploy(alices)
    wait_until(logged(sandboxed, alices.job_id, "STARTED"), 20, "alice's server")
    wait_until(lambda: _command_lines_with("s3cr3t"), 20, "alice's server on the host")

    probe = "echo @BEGIN@; ps -eo pid=,args=; echo @END@"
    code, _, log = run_to_end(sandboxed, probe, owner="bob")

    assert code == 0, log
    listed = log.split("@BEGIN@", 1)[1].split("@END@", 1)[0].strip().splitlines()
    assert any("ps -eo" in line for line in listed), listed
    assert not any("s3cr3t" in line or "sleep" in line for line in listed), listed
    assert len(listed) <= 4, listed  # tini, sh, ps (and nothing of the host's)
    assert listed[0].split()[0] == "1", listed


def _command_lines_with(text: str) -> list[str]:
    lines = (
        " ".join(process.info["cmdline"] or []) for process in psutil.process_iter(["cmdline"])
    )
    return [line for line in lines if text in line]


def test_a_stop_asked_as_the_container_starts_ends_the_job_with_sigterm(sandboxed):
    # The SIGTERM reaches the init while runc starts the container, and is forwarded to
    # its tini once that can take it (a namespace's first process drops what it neither
    # handles nor blocks): the worker ends with 143 at once, not after the grace. (The
    # window is a few milliseconds: this passes without the init's wait too, mostly.)
    job = launch("sleep 300")
    sandboxed.deploy(job)
    # Once the init runs runc, it has its own handlers (a spawner's fork inherits the
    # spawner's until then), and runc takes a while yet to start the container.
    init = psutil.Process(sandboxed.init_pids(job.job_id)[0])
    wait_until(lambda: init.children(), 20, "the init to start runc")
    sandboxed.stop(job.job_id, grace_seconds=300)

    report = wait_until(ended(sandboxed, job.job_id), 20, "the stopped job to end")

    assert report.workers[0].exit_code == 143, log_of(sandboxed, job.job_id)


def test_ended_workers_leave_no_cgroup_behind(sandboxed):
    # Each ends with a child still exiting. runc's delete left a container's (empty)
    # cgroups in a v1 hierarchy now and then (nine seen after a day's runs here); this
    # does not make it happen at will, it checks that nothing is left.
    for _ in range(3):
        code, _, log = run_to_end(sandboxed, "sleep 0.2 & echo started")
        assert code == 0, log
    assert sandboxed.sandbox is not None
    parent = sandboxed.sandbox.cgroup_parent
    assert [path for path in Path("/sys/fs/cgroup").glob(f"*/{parent}/*") if path.is_dir()] == []


def test_a_memory_hog_is_held_to_the_job_s_limit_and_fails_saying_so(sandboxed):
    hog = (
        f"{PYTHON} -c 'import time; b = bytearray(100 * 2**20);"
        ' b[::4096] = b"x" * len(b[::4096]); time.sleep(8)\''
    )
    command = f"head -c 60M /dev/zero > /dev/shm/filler && ({hog} & {hog} & {hog} & wait; exit 1)"
    job = launch(command)
    job = replace(job, workers=tuple(replace(w, memory=256) for w in job.workers))
    sandboxed.deploy(job)
    report = wait_until(ended(sandboxed, job.job_id), 20, "the hog to be killed")
    worker = report.workers[0]
    assert worker.state is WorkerState.FAILED
    assert worker.reason.startswith("OOMKilled"), (worker, log_of(sandboxed, job.job_id))
    assert "memory limit" in log_of(sandboxed, job.job_id)


def test_a_container_runc_left_half_made_is_the_node_s_failure_and_forgotten_on_removal(
    sandboxed,
):
    # What a runc killed while making a container leaves (a deploying worker killed, and
    # the job removed and deployed again): its directory, with no state in it.
    job = launch("echo ran")
    assert sandboxed.sandbox is not None
    half_made = sandboxed.sandbox.runtime_root / container_name(job.job_id, job.attempt, 0)
    half_made.mkdir(parents=True)
    (half_made / "exec.fifo").touch()

    sandboxed.deploy(job)
    worker = wait_until(ended(sandboxed, job.job_id), 20, "the worker to end").workers[0]
    assert worker.state is WorkerState.FAILED
    assert worker.reason.startswith("SandboxNotStarted"), (worker, log_of(sandboxed, job.job_id))
    assert classify(worker.exit_code, "", reason=worker.reason).failure_class == "infrastructure"

    sandboxed.remove(job.job_id)
    sandboxed.deploy(job)
    report = wait_until(ended(sandboxed, job.job_id), 20, "the job deployed again to end")
    assert report.workers[0].state is WorkerState.SUCCEEDED, log_of(sandboxed, job.job_id)
    assert "ran\n" in log_of(sandboxed, job.job_id)


def test_a_fork_loop_stops_at_the_job_s_pids_limit(sandboxed):
    fork_loop = (
        "import os, time\n"
        "started = 0\n"
        "while started < 500:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        break\n"
        "    started += 1\n"
        "print('STARTED', started, flush=True)\n"
        "os.killpg(0, 9)\n"
    )
    _, _, log = run_to_end(sandboxed, f"{PYTHON} -c {shlex.quote(fork_loop)}")
    started = int(log.split("STARTED", 1)[1].split()[0])
    assert 0 < started < PIDS_LIMIT, log


def test_killing_a_job_kills_what_it_double_forked_into_a_new_session(sandboxed):
    job = launch(f"{UNMARKED} setsid nohup sleep 8771 > /dev/null 2>&1 & echo FORKED; sleep 300")
    sandboxed.deploy(job)
    wait_until(logged(sandboxed, job.job_id, "FORKED"), 20, "the fork")
    wait_until(lambda: sleepers("8771"), 20, "the double-forked sleep")
    sandboxed.stop(job.job_id, grace_seconds=0)
    sandboxed.remove(job.job_id)
    wait_until(lambda: not sleepers("8771"), 20, "the double-forked sleep to die")


def sleepers(argument: str) -> list[psutil.Process]:
    return [
        process
        for process in psutil.process_iter(["cmdline"])
        if process.info["cmdline"] == ["sleep", argument]
    ]


def test_a_job_cannot_reach_a_port_on_the_host_s_loopback(sandboxed):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        probe = (
            f"{PYTHON} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'"
            " && echo REACHED || echo REFUSED"
        )
        _, _, log = run_to_end(sandboxed, probe)
    assert "REFUSED" in log and "REACHED" not in log, log


def test_the_system_is_read_only_and_tmp_is_the_job_s_own(sandboxed, host_tmp):
    marker = Path("/tmp") / f"trainyard-sandbox-{host_tmp.name}"
    marker.write_text("host")
    try:
        _, _, log = run_to_end(
            sandboxed,
            f"touch /usr/trainyard-probe || echo READ-ONLY; ls {marker} || echo PRIVATE-TMP",
        )
    finally:
        marker.unlink()
    assert "READ-ONLY" in log and "PRIVATE-TMP" in log, log


def test_the_isolation_the_job_page_shows_names_what_is_in_force(sandboxed):
    limits = sandboxed.isolation(launch("true")).limits
    for words in ("runc", "pid, mount, ipc, uts, network namespaces", "memory", "CPU quota",
                  f"{PIDS_LIMIT} pids", "job netns on bridge tyt", "no egress"):  # fmt: skip
        assert words in limits, limits
    assert len(limits) <= 300, limits  # what the job's record holds


def test_a_sandbox_the_host_cannot_run_is_refused_saying_why(host_tmp, monkeypatch, caplog):
    monkeypatch.setattr("jobmanager.backends.sandbox.TINI", str(host_tmp / "no-tini"))
    with pytest.raises(ValueError, match="tini not installed"):
        LocalBackend(host_tmp / "state", host_tmp / "logs", nodes=NODES, sandbox="runc")

    # The default runs bare processes there, and says so wherever isolation is shown.
    backend = LocalBackend(host_tmp / "state", host_tmp / "logs", nodes=NODES)

    assert backend.sandbox is None and backend.sandbox_note == "tini not installed"
    limits = backend.isolation(launch("true")).limits
    assert limits.startswith("bare processes (no sandbox: tini not installed); setrlimit")
    assert backend.containment.startswith("Jobs run as bare processes, not in containers")
    assert "no sandbox here (tini not installed)" in caplog.text


def test_read_only_cgroups_leave_the_default_without_a_sandbox(host_tmp, monkeypatch):
    # As in a container whose /sys/fs/cgroup is mounted read-only.
    monkeypatch.setattr("jobmanager.backends.sandbox.CGROUPS", host_tmp / "no-cgroups")

    backend = LocalBackend(host_tmp / "state", host_tmp / "logs", nodes=NODES)

    assert backend.sandbox is None
    assert backend.sandbox_note.startswith("the cgroups under ")


def test_runc_is_the_runtime_in_use(sandboxed):
    job = launch("sleep 300")
    sandboxed.deploy(job)
    assert sandboxed.sandbox is not None
    root = str(sandboxed.sandbox.runtime_root)
    listed = wait_until(
        lambda: job.job_id in (out := runc_list(root)) and out, 20, "the container to be listed"
    )
    assert "running" in listed


def runc_list(root: str) -> str:
    return subprocess.run(
        ["runc", "--root", root, "list"], capture_output=True, text=True, check=False
    ).stdout


def python_job(program: str) -> str:
    return f"{PYTHON} -c {shlex.quote(program)}"


LISTEN = (
    "import os, socket\n"
    "port = int(os.environ.get('LISTEN_PORT') or os.environ['MASTER_PORT'])\n"
    "server = socket.create_server(('0.0.0.0', port))\n"
    "print('LISTENING', flush=True)\n"
    "connection, _ = server.accept()\n"
    "print('GOT', connection.recv(64).decode(), flush=True)\n"
)
CONNECT = (
    "import os, socket, sys, time\n"
    "deadline = time.monotonic() + 30\n"
    "while True:\n"
    "    try:\n"
    "        connection = socket.create_connection((sys.argv[1], int(sys.argv[2])), 2)\n"
    "        break\n"
    "    except OSError as error:\n"
    "        if time.monotonic() > deadline or len(sys.argv) > 3:\n"
    "            print('UNREACHABLE', error, flush=True)\n"
    "            sys.exit(3)\n"
    "        time.sleep(0.1)\n"
    "connection.sendall(b'hello from ' + os.environ['RANK'].encode())\n"
    "print('SENT', flush=True)\n"
)


def test_two_workers_of_a_job_reach_each_other_at_the_job_s_address(sandboxed):
    command = (
        f'if [ "$RANK" = 0 ]; then {python_job(LISTEN)};'
        f' else {python_job(CONNECT)} "$MASTER_ADDR" "$MASTER_PORT"; fi'
    )
    job = launch(command, workers=2)
    sandboxed.deploy(job)
    report = wait_until(ended(sandboxed, job.job_id), 20, "the two workers to end")
    assert [w.exit_code for w in report.workers] == [0, 0], log_of(sandboxed, job.job_id, 1)
    assert "GOT hello from 1" in log_of(sandboxed, job.job_id, 0)
    address = sandboxed.job_address(job.job_id)
    assert address is not None and address.startswith("10.88.")


def test_the_host_reaches_a_job_at_its_address_and_other_jobs_do_not(sandboxed):
    server = launch(python_job(LISTEN), env={"LISTEN_PORT": "7711"})
    sandboxed.deploy(server)
    wait_until(logged(sandboxed, server.job_id, "LISTENING"), 20, "the job's server")
    address = sandboxed.job_address(server.job_id)
    assert address is not None
    _, _, log = run_to_end(sandboxed, f"{python_job(CONNECT)} {address} 7711 once")
    assert "UNREACHABLE" in log, log  # another job, even of the same owner
    with socket.create_connection((address, 7711), timeout=10) as connection:
        connection.sendall(b"hello from the host")
    wait_until(logged(sandboxed, server.job_id, "GOT hello from the host"), 20, "the host's hello")


def test_a_job_reaches_no_port_of_the_host_and_has_no_route_without_egress(sandboxed):
    assert sandboxed._network is not None
    gateway = str(sandboxed._network.gateway)
    with socket.create_server(("0.0.0.0", 0)) as server:
        port = server.getsockname()[1]
        _, _, log = run_to_end(
            sandboxed,
            f"{python_job(CONNECT)} {gateway} {port} once; echo ROUTES; cat /proc/net/route",
        )
    assert "UNREACHABLE" in log, log
    routes = log.split("ROUTES", 1)[1].splitlines()[2:]
    assert not any(line.split()[1] == "00000000" for line in routes if line.strip()), routes


def test_an_ended_job_is_removed_at_once_and_its_namespace_and_bundle_soon_after(sandboxed):
    job = launch("echo ran")
    sandboxed.deploy(job)
    wait_until(ended(sandboxed, job.job_id), 20, "the job to end")
    assert sandboxed.sandbox is not None
    root = str(sandboxed.sandbox.runtime_root)
    netns = sandboxed.job_namespace(job.job_id)
    assert netns and os.path.exists(netns)
    # Its init removed runc's record of the stopped container: no `runc delete` is left
    # for the removal to run (a runc process of some ms of CPU for every job).
    assert job.job_id not in runc_list(root)

    sandboxed.remove(job.job_id)

    assert job.job_id not in sandboxed.reports() and job.job_id not in runc_list(root)
    assert "ran\n" in log_of(sandboxed, job.job_id)  # the log stays
    trash = sandboxed.state_dir / ".removing"
    wait_until(
        lambda: not os.path.exists(netns) and not any(trash.iterdir()),
        20,
        "the namespace and the bundle to go",
    )
    parent = sandboxed.sandbox.cgroup_parent
    assert [path for path in Path("/sys/fs/cgroup").glob(f"*/{parent}/*") if path.is_dir()] == []


def test_a_job_takes_a_namespace_made_ahead_of_it_never_one_another_job_used(sandboxed):
    network = sandboxed._network
    assert network is not None and sandboxed.spare_namespaces > 0
    first = launch("true")
    sandboxed.deploy(first)  # its namespace made on its path, the spares behind it
    spares = wait_until(lambda: _spares(network, at_least=sandboxed.spare_namespaces), 20, "spares")
    wait_until(ended(sandboxed, first.job_id), 20, "the first job to end")
    first_netns = sandboxed.job_namespace(first.job_id)
    sandboxed.remove(first.job_id)
    assert first_netns not in spares
    wait_until(lambda: not os.path.exists(first_netns), 20, "the first job's namespace to go")

    server = launch(python_job(LISTEN), env={"LISTEN_PORT": "7713"})
    sandboxed.deploy(server)
    netns, address = sandboxed.job_namespace(server.job_id), sandboxed.job_address(server.job_id)
    assert netns in spares and netns not in _spares(network)  # taken: no other job gets it
    wait_until(logged(sandboxed, server.job_id, "LISTENING"), 20, "the job's server")
    with socket.create_connection((address, 7713), timeout=10) as connection:
        connection.sendall(b"hello from the host")
    wait_until(logged(sandboxed, server.job_id, "GOT hello from the host"), 20, "the host's hello")
    sandboxed.remove(server.job_id)
    wait_until(lambda: not os.path.exists(netns), 20, "the server's namespace to go")

    left = _spares(network)
    network.remove_spares()  # as the backend's process does at its end
    assert left and not any(os.path.exists(path) for path in left) and not _spares(network)


def _spares(network, at_least: int = 0) -> set[str]:
    """The paths of the network's spare namespaces, made and not taken (none until there
    are ``at_least``)."""
    listed = network.spares.iterdir() if network.spares.is_dir() else []
    paths = {f"/run/netns/{path.name}" for path in listed if not path.name.startswith(".")}
    return paths if len(paths) >= at_least else set()


SESSION_ENTER = REPOSITORY / "jobmanager/backends/session_enter.py"


def in_session(backend: LocalBackend, job_id: str, command: str) -> subprocess.CompletedProcess:
    """``command`` run in the job's worker 0 as the SSH gateway runs a session's process:
    through session_enter, the worker's confinement passed on a pipe."""
    # None until runc has written the container's pid, which may come after the job's
    # first output on a loaded host.
    confinement = wait_until(lambda: backend.session_confinement(job_id), 20, "the container")
    reader, writer = os.pipe()
    os.write(writer, json.dumps(confinement.to_json()).encode())
    os.close(writer)
    try:
        return subprocess.run(
            [sys.executable, "-I", "-S", str(SESSION_ENTER), "--fd", str(reader), "--",
             "/bin/sh", "-c", command],
            pass_fds=(reader,), capture_output=True, text=True, timeout=60,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, check=False,
        )  # fmt: skip
    finally:
        os.close(reader)


def test_a_session_enters_the_job_s_container_and_what_it_forks_dies_with_the_job(sandboxed):
    job = launch("echo STARTED; sleep 300")
    sandboxed.deploy(job)
    wait_until(logged(sandboxed, job.job_id, "STARTED"), 20, "the job to start")
    session = in_session(
        sandboxed, job.job_id,
        f"id -u; ps -eo args=; {UNMARKED} setsid nohup sleep 8772 > /dev/null 2>&1 & echo FORKED",
    )  # fmt: skip
    assert session.returncode == 0, session.stderr
    lines = session.stdout.splitlines()
    assert lines[0] == str(job.run_as.uid)
    assert any(line.startswith("sleep 300") for line in lines), lines  # the job's own
    assert "FORKED" in lines
    wait_until(lambda: sleepers("8772"), 20, "the session's double-forked sleep")
    sandboxed.stop(job.job_id, grace_seconds=0)
    sandboxed.remove(job.job_id)
    wait_until(lambda: not sleepers("8772"), 20, "the session's sleep to die with the job")


def test_a_terminal_session_gets_a_terminal_inside_the_container(sandboxed):
    job = launch("echo STARTED; sleep 300")
    sandboxed.deploy(job)
    wait_until(logged(sandboxed, job.job_id, "STARTED"), 20, "the job to start")
    confinement = wait_until(lambda: sandboxed.session_confinement(job.job_id), 20, "the container")
    master, slave = os.openpty()
    reader, writer = os.pipe()
    os.write(writer, json.dumps(confinement.to_json()).encode())
    os.close(writer)
    helper = subprocess.Popen(
        [sys.executable, "-I", "-S", str(SESSION_ENTER), "--fd", str(reader), "--tty", "--",
         "/bin/sh", "-c", "test -t 0 && echo TERMINAL-$(id -u)"],
        stdin=slave, stdout=slave, stderr=slave, pass_fds=(reader,),
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )  # fmt: skip
    os.close(slave)
    os.close(reader)
    output = b""
    with contextlib.suppress(OSError):  # EIO once every side of the terminal is closed
        while chunk := os.read(master, 4096):
            output += chunk
    os.close(master)
    assert helper.wait(timeout=60) == 0, output
    text = output.decode(errors="replace")
    assert f"TERMINAL-{job.run_as.uid}" in text, text


def _filesystem(path: str) -> str:
    return subprocess.run(
        ["stat", "--file-system", "--format", "%T", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_runc_s_state_and_a_job_s_bundle_are_on_a_tmpfs_and_go_with_the_job(sandboxed):
    # Files made there cost microseconds of CPU; on this host's disk, 0.4-0.5 ms each.
    job = launch("sleep 300")
    sandboxed.deploy(job)
    assert sandboxed.sandbox is not None
    container = container_name(job.job_id, job.attempt, 0)
    running = wait_until(
        lambda: sandboxed.session_confinement(job.job_id), 20, "the container to run"
    )
    bundle = Path(running.sandbox["bundle"])
    assert _filesystem(str(bundle)) == "tmpfs"
    assert _filesystem(str(sandboxed.sandbox.runtime_root / container)) == "tmpfs"
    assert oct(bundle.stat().st_mode & 0o777) == "0o700"  # the job's environment is in it

    sandboxed.remove(job.job_id)

    assert not bundle.exists() and not (sandboxed.sandbox.runtime_root / container).exists()


def test_a_test_sessions_sweep_leaves_a_live_backends_runtime_files_and_takes_abandoned_ones(
    sandboxed, host_tmp
):
    # Another test process starting and ending its session beside a running job (CI's
    # xdist workers): its sweep once removed the empty rootfs of this job's bundle.
    job = launch("sleep 300")
    sandboxed.deploy(job)
    running = wait_until(
        lambda: sandboxed.session_confinement(job.job_id), 20, "the container to run"
    )
    rootfs = Path(running.sandbox["bundle"]) / "rootfs"
    mount_points = sorted(path.name for path in rootfs.iterdir())  # the container's

    with private_sandbox_network():
        pass

    assert sorted(path.name for path in rootfs.iterdir()) == mount_points, mount_points
    assert [w.state for w in sandboxed.reports()[job.job_id].workers] == [WorkerState.RUNNING]
    gone = host_tmp / "a backend's state, removed"
    make_runtime_dir(runtime_dir(gone), gone)  # as a killed test's backend left it
    assert runtime_dir(gone) in remove_abandoned_runtime_dirs()
    assert not runtime_dir(gone).exists() and rootfs.is_dir()


def test_a_runtime_directory_that_is_not_root_s_own_is_refused(host_tmp):
    # /dev/shm is writable by every account: one could make the directory first.
    require_root()
    if available():
        pytest.skip(f"no runc sandbox here: {available()}")
    runtime = runtime_dir(host_tmp / "state")
    runtime.mkdir()
    runtime.chmod(0o755)
    try:
        with pytest.raises(ValueError, match="is not this account's own directory"):
            LocalBackend(host_tmp / "state", host_tmp / "logs", nodes=NODES, sandbox="runc")
    finally:
        runtime.rmdir()
