"""The ``trainyard`` command-line client as a user runs it: the installed console script
in a real process, against a live server (gunicorn, a Celery worker and beat) whose local
backend runs every job as real processes on this host; SSH through OpenSSH's client."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.accounts.actions import create_api_token
from backend.jobs.models import Job, JobStatus
from tests.e2e.dashboard import PASSWORD, live_servers, set_password
from tests.polling import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

NODES = ",".join([*(f"a100-{index}:A100:8" for index in range(1, 5)), "cpu-1:cpu:0", "cpu-2:cpu:0"])
TRAINYARD = str(Path(sys.executable).with_name("trainyard"))
DEADLINE = 90


@pytest.fixture
def server(world, host_tmp, redis_url) -> Iterator[str]:
    gateway = {"TRAINYARD_SSH_GATEWAY": "gateway.example.com", "TRAINYARD_SSH_PORT": "2222"}
    with live_servers(host_tmp, redis_url, NODES, extra_env=gateway) as running:
        yield running.base_url


@pytest.fixture
def cli(server, world, tmp_path):
    """Run ``trainyard`` as mia, with her token in the environment, config in tmp."""
    _, token = create_api_token(world.member, "cli tests")
    home = tmp_path / "home"
    home.mkdir()

    def run(*args: str, stdin: str = "", env: dict | None = None, timeout: float = DEADLINE):
        environment = {
            "PATH": os.environ["PATH"], "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "TRAINYARD_URL": server, "TRAINYARD_TOKEN": token, "COLUMNS": "200",
        } | (env or {})  # fmt: skip
        return subprocess.run(
            [TRAINYARD, *args], input=stdin, capture_output=True, text=True,
            env=environment, timeout=timeout,
        )  # fmt: skip

    return run


def manifest(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


def test_a_manifest_submitted_with_wait_returns_the_jobs_exit_code(cli, tmp_path):
    job_file = manifest(
        tmp_path,
        "vc: vision\nname: exits-three\ngpu_type: A100\ngpus_per_worker: 1\n"
        "max_wall_time: 10m\ncommand: echo training; exit 3\n",
    )

    done = cli("submit", "-f", job_file, "--wait", "--poll", "0.2", "--retries", "3")

    assert done.returncode == 3, done.stderr
    job = Job.objects.get(job_id=done.stdout.strip())
    assert (job.name, job.status, job.exit_code) == ("exits-three", JobStatus.FAILED, 3)
    assert (job.max_wall_time, job.retries_used) == (600, 0)  # a user error: not retried
    progress = done.stderr.splitlines()  # each change of status it saw, in order
    seen = [line.split()[2].rstrip(":") for line in progress]
    lifecycle = ["queued", "scheduling", "running", "failed"]
    assert seen == sorted(set(seen), key=lifecycle.index) and seen[-1] == "failed"
    assert progress[-1].endswith(
        "failed: user error: your command exited 3 and its log shows no infrastructure fault; "
        "not retried: a retry would repeat it (retry_on: any retries user errors too)"
    )

    retried = cli("submit", "-f", job_file, "--retry-on", "any", "--retries", "1")
    assert retried.returncode == 0, retried.stderr
    assert Job.objects.get(job_id=retried.stdout.strip()).retry_on == "any"

    finished = cli("submit", "--vc", "vision", "--gpu-type", "A100", "--gpus", "1", "--wait",
                   "--poll", "0.2", "--", "echo", "all good")  # fmt: skip
    assert finished.returncode == 0, finished.stderr


def test_a_manifest_with_an_array_submits_its_tasks_and_waits_for_them_all(cli, tmp_path):
    sweep = manifest(
        tmp_path,
        "vc: vision\nname: sweep\ngpu_type: A100\ngpus_per_worker: 1\nmax_wall_time: 10m\n"
        'command: test "$LR" != 0.3\narray:\n  tasks: [{LR: "0.1"}, {LR: "0.2"}, {LR: "0.3"}]\n',
    )

    done = cli("submit", "-f", sweep, "--wait", "--poll", "0.2", "--retries", "0")

    assert done.returncode == 1, done.stderr  # the third task fails: the array did not pass
    jobs = Job.objects.filter(array__array_id=done.stdout.strip()).order_by("array_index")
    assert [(job.env["LR"], job.status) for job in jobs] == [
        ("0.1", JobStatus.FINISHED), ("0.2", JobStatus.FINISHED), ("0.3", JobStatus.FAILED),
    ]  # fmt: skip
    assert "1 failed, 2 finished" in done.stderr.splitlines()[-1]

    array_id = done.stdout.strip()
    third = cli("logs", f"{array_id}_2")  # Slurm's ARRAY_INDEX names a task
    assert third.returncode == 0, third.stderr
    assert third.stdout == cli("logs", jobs[2].job_id).stdout
    assert third.stdout.startswith("=== attempt 1 on a100-")
    shown = cli("show", f"{array_id}_2", "--json")
    assert json.loads(shown.stdout)["id"] == jobs[2].job_id
    explained = cli("logs", array_id)
    assert explained.returncode == 1
    assert (
        f"{array_id} is a job array of 3 tasks, not a job: name a task as {array_id}_0 to "
        f"{array_id}_2, or list them with trainyard jobs --array {array_id}."
    ) in explained.stderr
    assert (
        f"Array {array_id} has no task 7: its tasks are 0 to 2."
        in cli("show", f"{array_id}_7").stderr
    )
    listed = cli("list", "--array", array_id, "--json")  # list: an alias of jobs
    assert listed.returncode == 0, listed.stderr
    assert sorted(job["id"] for job in json.loads(listed.stdout)) == sorted(
        job.job_id for job in jobs
    )


def test_logs_follow_prints_the_job_as_it_runs_to_its_end(cli, tmp_path):
    command = "for i in 1 2 3 4 5; do echo step $i; sleep 0.2; done; echo done training"
    job_id = cli(
        "submit", "--vc", "vision", "--gpu-type", "A100", "--gpus", "1", "--", command
    ).stdout.strip()

    followed = cli("logs", job_id, "-f", "--poll", "0.2")

    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert lines[0].startswith("=== attempt 1 on a100-")
    assert lines[1:] == ["step 1", "step 2", "step 3", "step 4", "step 5", "done training"]
    everything = cli("logs", job_id)
    assert everything.stdout == followed.stdout  # one worker: the full log is the same


def test_a_bad_manifest_prints_the_field_errors_and_exits_non_zero(cli, tmp_path):
    typo = cli("submit", "-f", manifest(tmp_path, "vc: vision\ngpu_typ: A100\ncommand: x\n"))
    assert typo.returncode == 2
    assert "unknown field 'gpu_typ'" in typo.stderr

    refused = cli("submit", "-f", manifest(tmp_path, "vc: nowhere\nworkers: 0\ncommand: x\n"))
    assert refused.returncode == 2
    assert "vc: No virtual cluster named 'nowhere' of yours." in refused.stderr
    assert "workers: Ensure this value is greater than or equal to 1." in refused.stderr

    flags = cli("submit", "-f", manifest(tmp_path, "vc: vision\nmax_wall_time: 30d\n"),
                "--gpu-type", "A100", "--gpus", "16", "--", "python train.py")  # fmt: skip
    assert flags.returncode == 2
    assert flags.stderr.count("\n") >= 2, flags.stderr  # both mistakes, in one answer
    assert "--gpus: The largest A100 node has 8 GPUs; a worker asks for 16." in flags.stderr
    assert "max_wall_time: VC vision allows at most 7 d" in flags.stderr  # from the manifest

    broken = cli("submit", "-f", manifest(tmp_path, "vc: [vision\n"))
    assert broken.returncode == 2 and "not valid YAML" in broken.stderr
    assert Job.objects.count() == 0


def test_jobs_show_kill_many_queue_and_usage(cli, world):
    a100 = ("--vc", "vision", "--gpu-type", "A100", "--gpus", "8")
    sleepers = [
        cli("submit", *a100, "--name", f"sleeper-{n}", "--", "sleep 300").stdout.strip()
        for n in range(2)
    ]
    too_big = cli(
        "submit", *a100, "--workers", "4", "--preemptible", "--name", "too-big", "--", "sleep 1"
    )
    assert too_big.returncode == 0, too_big.stderr
    sleepers.append(too_big.stdout.strip())  # all 4 nodes: 2 are busy

    def statuses() -> list[str]:
        return [Job.objects.get(job_id=job_id).status for job_id in sleepers]

    wait_until(lambda: statuses()[:2] == ["running"] * 2, DEADLINE, "two sleepers running")
    listed = json.loads(cli("jobs", "--status", "running", "--json").stdout)
    assert sorted(job["id"] for job in listed) == sorted(sleepers[:2])
    table = cli("jobs").stdout
    assert "sleeper-0" in table and "1x8 A100" in table and "too-big" in table
    assert sleepers[2] in cli("queue", "vision").stdout
    usage = cli("usage").stdout
    assert "vision" in usage and "A100" in usage
    assert "sleep 300" in cli("show", sleepers[0]).stdout

    _, admin_token = create_api_token(world.vc_admin, "cli tests")
    as_admin = {"TRAINYARD_TOKEN": admin_token}
    changed = cli("change", sleepers[0], "--wall-time", "2h", "--retries", "0", env=as_admin)
    assert changed.returncode == 0, changed.stderr
    job = Job.objects.get(job_id=sleepers[0])
    assert (job.max_wall_time, job.max_retries) == (7200, 0)
    assert job.events.last().reason == "changed: wall time 7 d -> 2 h; retries 3 -> 0"
    too_long = cli("change", sleepers[0], "--wall-time", "30d", env=as_admin)
    assert too_long.returncode == 2
    assert "--wall-time: VC vision allows at most 7 d" in too_long.stderr
    refused = cli("change", sleepers[1], "--retries", "9")  # mia is a member
    assert refused.returncode == 4
    assert "Only an admin of VC vision can change" in refused.stderr

    killed = cli("kill", *sleepers, "not-a-job", "--reason", "cleaning up")

    assert killed.returncode == 1  # one of them was refused
    assert "not-a-job: Not found." in killed.stdout
    wait_until(lambda: statuses() == ["killed"] * 3, DEADLINE, "all three killed")


def test_ssh_runs_openssh_with_the_jobs_endpoint(cli, world, tmp_path):
    if shutil.which("ssh") is None:
        pytest.skip("needs the OpenSSH client")
    job_id = cli(
        "submit", "--vc", "vision", "--gpu-type", "A100", "--gpus", "1", "--", "sleep 300"
    ).stdout.strip()
    wait_until(lambda: Job.objects.get(job_id=job_id).status == "running", DEADLINE, "running")

    # OpenSSH's -G prints the options it would connect with, and connects nowhere.
    resolved = cli("ssh", job_id, "-G", "-o", "StrictHostKeyChecking=accept-new")

    assert resolved.returncode == 0, resolved.stderr
    options = dict(line.split(" ", 1) for line in resolved.stdout.splitlines() if " " in line)
    assert options["user"] == f"mia+{job_id}"
    assert (options["hostname"], options["port"]) == ("gateway.example.com", "2222")
    cli("kill", job_id)
    # Once it is no longer running (a job queued a moment is often running before the CLI
    # asks, so the test asks after the kill): refused by the CLI, no ssh started.
    wait_until(lambda: Job.objects.get(job_id=job_id).status != "running", DEADLINE, "ended")
    not_running = cli("ssh", job_id)
    assert not_running.returncode == 1 and "SSH reaches running jobs only" in not_running.stderr


def test_login_stores_the_url_and_a_new_token_for_the_user_only(cli, server, world, tmp_path):
    set_password(world.member)
    signed_out = {"TRAINYARD_TOKEN": "", "TRAINYARD_URL": ""}

    refused = cli("login", "--url", server, "--username", "mia", "--password-stdin",
                  stdin="wrong\n", env=signed_out)  # fmt: skip
    assert refused.returncode == 4 and "Wrong username or password" in refused.stderr
    login = cli("login", "--url", server, "--username", "mia", "--password-stdin",
                stdin=f"{PASSWORD}\n", env=signed_out)  # fmt: skip

    assert login.returncode == 0, login.stderr
    assert "as mia" in login.stdout
    config = tmp_path / "home" / ".config" / "trainyard" / "config.json"
    stored = json.loads(config.read_text())
    assert stored["url"] == server and stored["token"].startswith("ty_")
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert cli("jobs", env=signed_out).returncode == 0  # from the stored config
    assert cli("jobs", env=signed_out | {"TRAINYARD_TOKEN": "ty_bogus"}).returncode == 4
