"""The SSH gateway with Debian's OpenSSH client: real jobs on the local backend, run as
their owners' accounts (ty-test-*), reached through ``python -m backend.gateway`` on the
test database."""

from __future__ import annotations

import os
import pty
import select
import shlex
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from backend.accounts.models import AllowedIp, SshSessionEvent
from backend.jobs.models import Job, JobStatus
from jobmanager.backends import runc
from tests.backend.gateway_support import (
    make_key,
    registered_key,
    running_gateway,
    ssh,
    ssh_argv,
    ssh_started,
)
from tests.backend.jobs_support import make_job
from tests.backend.local_support import NODES, PYTHON, JobManager, local_backend, submit
from tests.polling import wait_until
from tests.servers import free_port
from tests.unix_accounts import job_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

LONG_RUNNING = "echo started; sleep 600"


@pytest.fixture
def backend(host_tmp, settings):
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    backend = local_backend(host_tmp)
    yield backend
    for job_id in backend.reports():
        backend.remove(job_id)


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


@pytest.fixture
def gateway(host_tmp, backend) -> Iterator:
    with running_gateway(host_tmp, NODES) as gateway:
        yield gateway


@pytest.fixture
def mia_key(world, host_tmp):
    job_account(world.member.username)
    return registered_key(host_tmp, world.member)


def running_job(world, jobs, user=None, **spec) -> Job:
    job = submit(world, user=user, **({"command": LONG_RUNNING} | spec))
    return jobs.run_until(job, JobStatus.RUNNING)


def login(job: Job, rank: int | None = None) -> str:
    return f"{job.owner.username}+{job.job_id}" + ("" if rank is None else f".{rank}")


# --- sessions inside the job ---------------------------------------------------------------


def test_a_command_runs_inside_the_job_as_its_owner_with_its_environment(
    world, jobs, gateway, mia_key
):
    mia = job_account(world.member.username)
    job = running_job(world, jobs, env={"MY_SETTING": "from-the-submission"})
    probe = 'echo "$TRAINYARD_JOB_ID $RANK $WORLD_SIZE $CUDA_VISIBLE_DEVICES $MY_SETTING"'
    probe += "; id -u; pwd"

    result = ssh(gateway, mia_key, login(job), probe)

    assert result.returncode == 0, result.stderr + gateway.output()
    variables, uid, directory = result.stdout.splitlines()
    assert variables == f"{job.job_id} 0 1 0 from-the-submission"
    assert int(uid) == mia.uid
    assert directory.endswith(f"/{job.job_id}/work")
    opened = SshSessionEvent.objects.get(login=login(job))
    assert (opened.outcome, opened.user, opened.address) == ("opened", world.member, "127.0.0.1")


def test_a_command_s_exit_status_and_standard_error_come_back(world, jobs, gateway, mia_key):
    job = running_job(world, jobs)

    result = ssh(gateway, mia_key, login(job), "echo to-stderr >&2; exit 7")

    assert result.returncode == 7
    assert result.stderr.strip() == "to-stderr"


def test_standard_input_reaches_the_command(world, jobs, gateway, mia_key):
    job = running_job(world, jobs)

    result = ssh(gateway, mia_key, login(job), "wc -c", input="x" * 100_000)

    assert result.stdout.strip() == "100000"


def test_worker_n_is_reached_by_its_rank(world, jobs, gateway, mia_key):
    job = running_job(world, jobs, workers=2)

    first = ssh(gateway, mia_key, login(job), "echo $RANK")
    second = ssh(gateway, mia_key, login(job, 1), "echo $RANK")
    third = ssh(gateway, mia_key, login(job, 2), "echo $RANK")

    assert (first.stdout.strip(), second.stdout.strip()) == ("0", "1")
    assert third.returncode == 1
    assert f"job {job.job_id} has no worker 2 (workers 0 to 1)" in third.stderr


def test_an_interactive_shell_on_a_terminal_follows_the_window_size(
    world, jobs, gateway, mia_key, host_tmp
):
    job = running_job(world, jobs)
    tmux = ["tmux", "-L", f"trainyard-test-{gateway.port}", "-f", "/dev/null"]
    command = shlex.join(ssh_argv(gateway, mia_key, login(job), "-tt"))
    subprocess.run([*tmux, "new-session", "-d", "-x", "100", "-y", "30", command], check=True)

    def screen() -> str:
        return subprocess.run(
            [*tmux, "capture-pane", "-p", "-J"], capture_output=True, text=True
        ).stdout

    try:
        # Keys typed before the session's shell runs may be lost on the way (a busy machine
        # took over 20 s to show the prompt once): type at the prompt, as a person does.
        wait_until(lambda: "$ " in screen(), 60, "the shell's prompt")
        subprocess.run([*tmux, "send-keys", "echo cols=$COLUMNS who=$(id -un)", "Enter"])
        wait_until(lambda: "cols=100 who=ty-test-mia" in screen(), 20, "the shell to answer")
        subprocess.run([*tmux, "resize-window", "-x", "132", "-y", "30"], check=True)
        subprocess.run([*tmux, "send-keys", "echo cols=$COLUMNS tty=$(tty)", "Enter"])
        wait_until(lambda: "cols=132 tty=/dev/pts/" in screen(), 20, "the shell to see the resize")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def prompt_of(argv: list[str], seconds: float = 30) -> bytes:
    """What ``argv`` (ssh -tt) prints on a terminal of its own up to its shell's ``$ ``."""
    pid, master = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    seen = b""
    try:
        while b"$ " not in seen:
            ready, _, _ = select.select([master], [], [], seconds)
            assert ready, f"no prompt after {seconds}s, only {seen!r}"
            seen += os.read(master, 4096)
        return seen
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        os.close(master)


def test_terminal_sessions_one_after_another_each_get_their_shell(world, jobs, gateway, mia_key):
    job = running_job(world, jobs)
    argv = ssh_argv(gateway, mia_key, login(job), "-tt")

    for _ in range(3):  # each reuses what the last one closed
        assert b"ty-test-mia@" in prompt_of(argv)


def test_the_session_ends_with_a_message_when_the_job_is_killed(world, jobs, gateway, mia_key):
    job = running_job(world, jobs)
    session = ssh_started(gateway, mia_key, login(job), "echo ready; sleep 600")
    try:
        assert session.stdout.readline().strip() == "ready"
        response = world.client(world.member).post(f"/api/v1/jobs/{job.job_id}/kill/", {})
        assert response.status_code == 200
        jobs.run_until(job, JobStatus.KILLED)
        _, stderr = session.communicate(timeout=30)
    finally:
        session.kill()
    assert session.returncode != 0
    assert f"trainyard: job {job.job_id} has ended" in stderr


# --- refusals ----------------------------------------------------------------------------


def test_another_user_s_key_is_refused(world, jobs, gateway, mia_key, host_tmp):
    job = running_job(world, jobs)
    otto_key = registered_key(host_tmp, world.outsider)
    stranger = make_key(host_tmp, "id_stranger")

    for key in (otto_key, stranger):
        result = ssh(gateway, key, login(job), "id")
        assert result.returncode == 255
        assert "Permission denied (publickey)" in result.stderr
        assert "is not one of mia's registered SSH keys" in result.stderr
        assert result.stdout == ""


def test_another_user_s_job_is_refused(world, jobs, gateway, mia_key, host_tmp):
    job = running_job(world, jobs)
    otto_key = registered_key(host_tmp, world.outsider)

    result = ssh(gateway, otto_key, f"otto+{job.job_id}", "id")

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.strip() == f"trainyard: otto has no job {job.job_id}"
    refused = SshSessionEvent.objects.get(outcome="refused")
    assert (refused.user, refused.job_id) == (world.outsider, job.job_id)


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.FINISHED])
def test_a_job_that_is_not_running_is_refused(world, gateway, mia_key, status):
    job = make_job(world, status=status)

    result = ssh(gateway, mia_key, login(job), "id")

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.strip() == f"trainyard: job {job.job_id} is {status}, not running"


def test_a_login_that_names_no_job_is_told_the_form(world, gateway, mia_key):
    result = ssh(gateway, mia_key, "mia", "id")

    assert result.returncode == 255
    assert "log in as <user>+<job id>" in result.stderr


def test_allowed_ips_are_enforced_when_the_gateway_point_is_on(
    world, jobs, backend, host_tmp, mia_key
):
    job = running_job(world, jobs)
    # No trusted networks: the loopback client is any client.
    with running_gateway(host_tmp, NODES, TRAINYARD_SSH_TRUSTED_NETWORKS="") as gateway:
        refused = ssh(gateway, mia_key, login(job), "echo in")
        assert refused.returncode == 1
        assert refused.stderr.strip().startswith(
            "trainyard: your address 127.0.0.1 is not in your allowed IPs"
        )

        allowed = AllowedIp.objects.create(
            user=world.member,
            network="127.0.0.1/32",
            expires_at=timezone.now() + timedelta(days=1),
        )
        assert ssh(gateway, mia_key, login(job), "echo in").stdout == "in\n"

        allowed.expires_at = timezone.now() - timedelta(seconds=1)
        allowed.save()
        expired = ssh(gateway, mia_key, login(job), "echo in")
        assert expired.returncode == 1
        assert "is not in your allowed IPs" in expired.stderr

    with running_gateway(
        host_tmp, NODES, TRAINYARD_SSH_TRUSTED_NETWORKS="", TRAINYARD_ALLOWLIST_POINTS="nftables"
    ) as gateway:  # the gateway point off: allowed IPs are someone else's to enforce
        assert ssh(gateway, mia_key, login(job), "echo in").stdout == "in\n"


def test_a_session_opened_while_the_worker_s_container_starts_waits_for_it(
    world, jobs, backend, gateway, mia_key
):
    """A job is running once deployed, while its init may still be making the container
    (for seconds on a loaded host): a session opened then waits for it, not refused."""
    job = running_job(world, jobs)
    confinement = backend.session_confinement(job.job_id, wait_seconds=30)
    assert confinement is not None and confinement.sandbox is not None
    pid_file = Path(confinement.sandbox["bundle"]) / runc.CONTAINER_PID_FILE
    hidden = pid_file.with_name("hidden.pid")
    pid_file.rename(hidden)  # as before runc wrote it: the container is being made
    session = ssh_started(gateway, mia_key, login(job), "echo in")
    try:
        wait_until(
            lambda: "waiting for its container" in gateway.output() or session.poll() is not None,
            30,
            "the gateway to wait for the worker's container, or to refuse the session",
        )
        hidden.rename(pid_file)
        out, err = session.communicate(timeout=60)
    finally:
        session.kill()
        if hidden.exists():
            hidden.rename(pid_file)
    assert session.returncode == 0, err + gateway.output()
    assert out == "in\n"


# --- files and ports -----------------------------------------------------------------------


def job_dir_file(backend, job: Job, name: str) -> Path:
    return backend.state_dir / job.job_id / "work" / name


@pytest.mark.parametrize("protocol", ["sftp", "legacy scp"])
def test_scp_copies_up_and_down_and_the_files_are_the_owner_s(
    world, jobs, backend, gateway, mia_key, host_tmp, protocol
):
    mia = job_account(world.member.username)
    job = running_job(world, jobs)
    upload = host_tmp / "weights.bin"
    upload.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    legacy = ["-O"] if protocol == "legacy scp" else []
    remote = f"{login(job)}@127.0.0.1"

    up = subprocess.run(
        ssh_argv(
            gateway, mia_key, "", *legacy, str(upload), f"{remote}:weights.bin", program="scp"
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert up.returncode == 0, up.stderr + gateway.output()
    uploaded = job_dir_file(backend, job, "weights.bin")
    assert uploaded.read_bytes() == upload.read_bytes()
    assert (uploaded.stat().st_uid, uploaded.stat().st_gid) == (mia.uid, mia.gid)

    ssh(gateway, mia_key, login(job), "echo result-of-training > metrics.txt")
    down = subprocess.run(
        ssh_argv(
            gateway,
            mia_key,
            "",
            *legacy,
            f"{remote}:metrics.txt",
            str(host_tmp / "m.txt"),
            program="scp",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 0, down.stderr
    assert (host_tmp / "m.txt").read_text() == "result-of-training\n"


def test_sftp_lists_puts_and_gets_as_the_owner(world, jobs, backend, gateway, mia_key, host_tmp):
    mia = job_account(world.member.username)
    job = running_job(world, jobs)
    (host_tmp / "config.yaml").write_text("lr: 0.1\n")
    batch = host_tmp / "batch"
    batch.write_text(
        f"put {host_tmp / 'config.yaml'} config.yaml\nls -l\n"
        f"get config.yaml {host_tmp / 'back.yaml'}\n"
    )

    result = subprocess.run(
        [
            *ssh_argv(gateway, mia_key, "", "-b", str(batch), program="sftp"),
            f"{login(job)}@127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr + gateway.output()
    assert "config.yaml" in result.stdout and "ty-test-mia" in result.stdout
    assert (host_tmp / "back.yaml").read_text() == "lr: 0.1\n"
    assert job_dir_file(backend, job, "config.yaml").stat().st_uid == mia.uid


def test_a_port_the_job_listens_on_is_forwarded_and_no_other(
    world, jobs, gateway, mia_key, host_tmp
):
    job_port, local_port = free_port(), free_port()
    server = f"{PYTHON} -m http.server {job_port} --bind 127.0.0.1"
    job = running_job(world, jobs, command=f"cd /tmp && exec {server}")
    tunnel = subprocess.Popen(
        ssh_argv(
            gateway,
            mia_key,
            login(job),
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"127.0.0.1:{local_port}:localhost:{job_port}",
        ),
        stderr=subprocess.PIPE,
        text=True,
    )

    def served() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{local_port}/", timeout=2).ok
        except requests.RequestException:
            return False

    try:
        wait_until(served, 20, "the job's server through the tunnel")
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)

    database_port = 3306  # the portal's database (or anything else on this host)
    for port in (database_port, gateway.port):
        refused = ssh(gateway, mia_key, login(job), "-W", f"127.0.0.1:{port}")
        assert refused.returncode == 255
        # Bare processes share the host's 127.0.0.1, where the port is another's; a
        # sandboxed job's 127.0.0.1 is its own, where nothing listens on it.
        why = (
            f"no process of job {job.job_id} listens on port {port}"
            if jobs.backend.sandbox
            else f"port {port} at 127.0.0.1 is not job {job.job_id}'s"
        )
        assert why in refused.stderr
    nothing = ssh(gateway, mia_key, login(job), "-W", f"127.0.0.1:{free_port()}")
    assert nothing.returncode == 255
    assert f"no process of job {job.job_id} listens on port" in nothing.stderr


def test_a_server_started_over_ssh_is_the_job_s_and_can_be_forwarded_to(
    world, jobs, gateway, mia_key
):
    # What VS Code Remote-SSH does: exec its bootstrap, which starts its server in the
    # background, then forward to the port that server listens on.
    job = running_job(world, jobs)
    port = free_port()
    start = f"setsid {PYTHON} -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 < /dev/null &"
    assert ssh(gateway, mia_key, login(job), start).returncode == 0

    def forwarded() -> bool:
        # Refused until the server listens; once it does, answered, and ended (a -W whose
        # server hung up before the client's EOF stayed open: test_gateway_hijacks).
        answer = ssh(gateway, mia_key, login(job), "-W", f"127.0.0.1:{port}",
                     input="GET / HTTP/1.0\r\n\r\n", timeout=15)  # fmt: skip
        return answer.stdout.startswith("HTTP/1.0 200")

    wait_until(forwarded, 20, "the server the session started, through the gateway")


def test_the_host_key_is_kept_across_restarts(world, jobs, backend, host_tmp, mia_key):
    job = running_job(world, jobs)
    with running_gateway(host_tmp, NODES) as first:
        assert ssh(first, mia_key, login(job), "true").returncode == 0
        known_hosts = first.known_hosts.read_text()
    with running_gateway(host_tmp, NODES, var_dir=first.var_dir) as second:
        # StrictHostKeyChecking=yes with the first start's key: a new key would be refused.
        second.known_hosts.write_text(known_hosts.replace(str(first.port), str(second.port)))
        assert ssh(second, mia_key, login(job), "true").returncode == 0
