"""The local backend end to end: jobs submitted over REST, the job manager run in this
process (as tests/backend/jobmanager/test_job_manager.py runs it) with its default retry rules, and
every worker a real process on this host, run as its owner's Unix account (provisioned on
submission as ty-test-<user>)."""

from __future__ import annotations

import io
import os
import signal
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from backend.jobmanager.management.commands import stop_jobs
from backend.jobmanager.management.commands.stop_jobs import jobs_left_running, left_running_message
from backend.jobs.models import FailureClass, Job, JobStatus
from tests.backend.local_support import (
    JOBS,
    NODES,
    local_backend,
    log_of,
    script,
    submit,
)
from tests.jobmanager.test_local_backend import job_processes
from tests.jobmanager.test_local_sandbox import sandboxed_backend
from tests.polling import wait_until
from tests.unix_accounts import JOB_PYTHONPATH, REPOSITORY

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

DEADLINE_SECONDS = 60
SIGTERM_CATCHER = """
import signal, sys, time

def stop(signum, frame):
    print("caught SIGTERM, saving a checkpoint", flush=True)
    sys.exit(143)

signal.signal(signal.SIGTERM, stop)
print("training", flush=True)
while True:
    time.sleep(0.05)
"""
ALL_REDUCE = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # from WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print(
    f"rank {dist.get_rank()} of {dist.get_world_size()} (local {os.environ['LOCAL_RANK']}): "
    f"sum {value.item():g}",
    flush=True,
)
dist.destroy_process_group()
"""


def test_a_job_that_prints_and_exits_0_finishes_and_its_log_is_served(world, jobs):
    job = submit(world, command="echo hello from trainyard on GPUs $CUDA_VISIBLE_DEVICES")

    job = jobs.run_until(job, JobStatus.FINISHED)

    assert job.exit_code == 0
    assert job.run_as.startswith("ty-test-mia (uid ")  # the member's own account
    # The isolation in force, as the job page shows it: the default sandbox as root.
    in_force = "runc container per worker" if jobs.backend.sandbox else "setrlimit: each"
    assert job.limits.startswith(in_force) and job.limits == jobs.backend.limits_in_force
    client = world.client(world.member)
    download = client.get(f"{JOBS}{job.job_id}/log/")
    assert download.status_code == 200
    text = b"".join(download.streaming_content).decode()
    assert "hello from trainyard on GPUs 0\n" in text
    assert "=== attempt 1 on a100-" in text
    tail = client.get(f"{JOBS}{job.job_id}/log/tail/", {"worker": 0})
    assert tail.status_code == 200, tail.content
    assert "hello from trainyard" in tail.json()["text"] and tail.json()["complete"]


def test_a_syntax_error_fails_the_job_without_a_retry(world, jobs, host_tmp):
    job = submit(world, command=script(host_tmp, "train.py", 'print("epoch" 1)\n'), max_retries=3)

    job = jobs.run_until(job, JobStatus.FAILED)

    assert (job.exit_code, job.failure_class, job.retries_used) == (1, FailureClass.USER, 0)
    assert job.failure_rule == "python-syntax-error"
    assert "SyntaxError" in log_of(job)


def test_a_command_exiting_3_fails_at_once_as_a_user_error_not_retried(world, jobs):
    job = submit(world, command="echo training; exit 3", max_retries=3)
    submitted = time.monotonic()

    job = jobs.run_until(job, JobStatus.FAILED)

    assert time.monotonic() - submitted < 5
    assert (job.exit_code, job.failure_class, job.retries_used, job.attempt) == (
        3, FailureClass.USER, 0, 1,
    )  # fmt: skip
    assert job.status_message == (
        "user error: your command exited 3 and its log shows no infrastructure fault; "
        "not retried: a retry would repeat it (retry_on: any retries user errors too)"
    )
    assert job.insight_message == ""  # one line on the page, not two that disagree
    assert job.attempts.get(number=1).message == job.status_message


def test_a_command_exiting_3_is_retried_when_the_job_retries_on_any_failure(world, jobs):
    job = submit(world, command="echo training; exit 3", max_retries=3, retry_on="any")

    job = jobs.run_until(job, JobStatus.QUEUED, attempt=1)

    assert (job.failure_class, job.retries_used) == (FailureClass.USER, 1)
    assert job.not_before is not None  # after a backoff
    assert job.status_message.startswith("user error: your command exited 3 ")
    assert job.status_message.endswith("; retry 1 of 3 in 30 s")


def test_stop_jobs_stops_what_a_stopped_portal_leaves_running(world, jobs, monkeypatch):
    job = submit(world, command="echo started; sleep 300")
    jobs.run_until(job, JobStatus.RUNNING)
    wait_until(lambda: "started" in log_of(job), 20, "the job to start")
    # What make run says as it stops: the job keeps running, and how to stop it.
    assert left_running_message(jobs_left_running()) == (
        "1 job keeps running: the next make run adopts it. To stop it too: make stop-jobs."
    )
    monkeypatch.setattr(stop_jobs, "get_backend", lambda: jobs.backend)
    said = io.StringIO()

    call_command("stop_jobs", stdout=said)

    assert said.getvalue() == f"Stopping 1 job(s): {job.job_id}.\n"
    wait_until(lambda: job_processes(job.job_id) == [], 20, "its processes to end")
    job = jobs.run_until(job, JobStatus.KILLED)  # recorded at the job manager's next pass
    assert job.events.filter(reason="stopped with make stop-jobs").exists()
    assert left_running_message(jobs_left_running()) == ""


def test_a_job_killed_mid_run_leaves_no_process(world, jobs):
    job = submit(world, command="echo started; sleep 300 & sleep 300")
    jobs.run_until(job, JobStatus.RUNNING)
    wait_until(lambda: "started" in log_of(job), 20, "the job to start")

    response = world.client(world.member).post(f"{JOBS}{job.job_id}/kill/", {}, format="json")
    assert response.status_code == 200

    job = jobs.run_until(job, JobStatus.KILLED)
    assert job.finished_at is not None
    assert job_processes(job.job_id) == []


def test_a_job_over_its_wall_time_ends_as_timeout_and_is_gone(world, jobs):
    job = submit(world, command="echo started; sleep 300", max_wall_time=600)
    jobs.run_until(job, JobStatus.RUNNING)
    wait_until(lambda: "started" in log_of(job), 20, "the job to start")
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=601))

    job = jobs.run_until(job, JobStatus.TIMEOUT)

    assert "wall-time limit of 600 s" in job.status_message
    assert job_processes(job.job_id) == []


def test_a_preempted_borrower_gets_sigterm_is_requeued_at_its_place_and_runs_again(
    world, jobs, host_tmp
):
    # nlp (quota 8) borrows 16 GPUs beyond its quota; vision (quota 16) then asks.
    command = script(host_tmp, "borrower.py", SIGTERM_CATCHER)
    nlp_jobs = [
        submit(world, user=world.outsider, vc="nlp", gpus_per_worker=8, command=command)
        for _ in range(3)
    ]
    for job in nlp_jobs:
        jobs.run_until(job, JobStatus.RUNNING)
    queued_at = {job.pk: Job.objects.get(pk=job.pk).queued_at for job in nlp_jobs}

    guaranteed = submit(world, gpus_per_worker=8, workers=2, command="echo mine; sleep 1")
    preempted: list[str] = []

    def guaranteed_started() -> bool:
        preempted.extend(jobs.run().preempted)
        guaranteed.refresh_from_db()
        return guaranteed.status in (JobStatus.RUNNING, JobStatus.FINISHED)

    wait_until(guaranteed_started, 20, "the guaranteed job to start")

    (victim,) = [job for job in nlp_jobs if job.job_id in preempted]
    victim.refresh_from_db()
    assert "caught SIGTERM, saving a checkpoint" in log_of(victim)
    assert victim.queued_at == queued_at[victim.pk]  # its place at the head is kept
    first = victim.attempts.get(number=1)
    assert (first.failure_class, first.exit_code) == (FailureClass.PREEMPTION, 143)
    victim = jobs.run_until(victim, JobStatus.RUNNING, attempt=2)  # once the GPUs are back
    assert victim.retries_used == 0  # a preemption spends no retry
    wait_until(lambda: "=== attempt 2 on " in log_of(victim), 20, "the second attempt's log")


def test_a_two_worker_job_all_reduces_over_gloo_and_finishes(world, jobs, host_tmp):
    job = submit(
        world,
        type="distributed",
        workers=2,
        gpus_per_worker=4,
        command=script(host_tmp, "all_reduce.py", ALL_REDUCE),
        env={"PYTHONPATH": JOB_PYTHONPATH},  # torch, as a user's job finds its own
    )

    job = jobs.run_until(job, JobStatus.FINISHED, JobStatus.FAILED)

    logs = [log_of(job, rank) for rank in (0, 1)]
    assert job.status == JobStatus.FINISHED, logs
    assert "rank 0 of 2 (local 0): sum 3" in logs[0]
    assert "rank 1 of 2 (local 1): sum 3" in logs[1]


def test_a_two_worker_job_all_reduces_over_gloo_in_the_runc_sandbox(world, jobs, host_tmp):
    scripts = host_tmp / "scripts"  # all the containers see of host_tmp
    scripts.mkdir()
    scripts.chmod(0o711)
    shown = [str(scripts), str(REPOSITORY)]
    with sandboxed_backend(host_tmp, nodes=NODES, sandbox_readonly_paths=shown) as sandboxed:
        jobs.backend = sandboxed
        job = submit(
            world,
            type="distributed",
            workers=2,
            gpus_per_worker=4,
            command=script(scripts, "all_reduce.py", ALL_REDUCE),
            env={"PYTHONPATH": JOB_PYTHONPATH},
        )

        job = jobs.run_until(job, JobStatus.FINISHED, JobStatus.FAILED)

        logs = [log_of(job, rank) for rank in (0, 1)]
        assert job.status == JobStatus.FINISHED, logs
        assert "rank 0 of 2 (local 0): sum 3" in logs[0]
        assert "rank 1 of 2 (local 1): sum 3" in logs[1]
        assert "runc container per worker" in job.limits, job.limits


def test_a_worker_restart_loses_no_job(world, jobs, host_tmp):
    job = submit(world, command="echo started; sleep 300", max_retries=2)
    jobs.run_until(job, JobStatus.RUNNING)
    wait_until(lambda: "started" in log_of(job), 20, "the job to start")

    jobs.backend = local_backend(host_tmp)  # a new process: the old instance is gone
    jobs.run()
    job.refresh_from_db()
    assert (job.status, job.attempt) == (JobStatus.RUNNING, 1)

    (init_pid,) = jobs.backend.init_pids(job.job_id).values()
    os.kill(init_pid, signal.SIGKILL)  # the job dies while nobody watches
    job = jobs.run_until(job, JobStatus.QUEUED)

    assert job.retries_used == 1 and job.not_before is not None  # retried, after a backoff
    assert job.failure_class == FailureClass.UNKNOWN
    assert job.attempts.get(number=1).exit_code is None
    assert job_processes(job.job_id) == []  # what it left running was killed
    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    jobs.run_until(job, JobStatus.RUNNING, attempt=2)


def test_jobs_run_on_declared_gpus_that_say_so(world, jobs):
    job = submit(world, gpus_per_worker=2, command="echo declared=$TRAINYARD_GPUS_DECLARED")

    jobs.run_until(job, JobStatus.FINISHED)

    assert "declared=1" in log_of(job)
    assert all(node.declared for node in jobs.backend.nodes())
