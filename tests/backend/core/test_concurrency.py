"""Concurrent requests against a real multi-process web server: no double jobs, no limit slips."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier, Event

import pytest
import requests
from django.db import connection, transaction

from backend.accounts.actions import create_api_token
from backend.jobs import actions
from backend.jobs.job_request import JobRequest
from backend.jobs.models import Job, JobStatus
from tests.servers import kill_process_group, start_gunicorn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CLIENTS = 8


@pytest.fixture
def server():
    process, base_url = start_gunicorn(workers=2, threads=4)
    yield base_url
    kill_process_group(process, signal.SIGTERM)


def post_together(base_url: str, token: str, bodies: list[dict], headers: dict) -> list:
    """POST every body at the same moment from its own thread and connection."""
    barrier = Barrier(len(bodies))

    def post(body: dict) -> requests.Response:
        session = requests.Session()
        barrier.wait()
        return session.post(
            f"{base_url}/api/v1/jobs/",
            json=body,
            headers={"Authorization": f"Token {token}"} | headers,
            timeout=60,
        )

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def test_concurrent_retries_with_one_idempotency_key_make_one_job(world, server):
    _, token = create_api_token(world.member, "race")
    body = {"vc": "vision", "gpu_type": "A100", "command": "python train.py"}

    answers = post_together(server, token, [body] * CLIENTS, {"Idempotency-Key": "run-42"})

    assert [answer.status_code for answer in answers] == [201] * CLIENTS
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert Job.objects.filter(owner=world.member).count() == 1


def test_concurrent_submissions_cannot_slip_past_the_per_user_gpu_limit(world, server):
    world.vision.user_gpu_limit = 8
    world.vision.save()
    _, token = create_api_token(world.member, "race")
    body = {"vc": "vision", "gpu_type": "A100", "command": "python train.py", "gpus_per_worker": 2}

    answers = post_together(server, token, [body] * CLIENTS, {})

    assert [answer.status_code for answer in answers] == [201] * CLIENTS
    statuses = sorted(Job.objects.filter(owner=world.member).values_list("status", flat=True))
    # 8 GPUs allowed at 2 per job: exactly four run free, the other four wait for approval.
    assert statuses == [JobStatus.QUEUED] * 4 + [JobStatus.UNAPPROVED] * 4


def test_a_submission_waits_while_another_of_the_same_user_is_being_stored(world):
    """The per-user limit is checked under a lock: while one submission is stored but not
    committed, a second one of the same user waits, and then sees the first."""
    world.vision.user_gpu_limit = 2
    world.vision.save()
    spec_fields = {"vc": world.vision, "gpu_type": world.a100, "name": "j", "type": "batch",
                   "command": "true", "workers": 1, "min_workers": 1, "max_workers": 1,
                   "gpus_per_worker": 2, "cpus_per_worker": 16, "memory_per_worker": 1024,
                   "max_retries": 0, "max_wall_time": 3600}  # fmt: skip
    first_stored, second_done = Event(), Event()

    def first() -> None:
        with transaction.atomic():
            actions._create_job(world.member, JobRequest(**spec_fields), None)
            first_stored.set()
            # Hold the transaction open; the second submission must not finish meanwhile.
            second_done.wait(timeout=2)
        connection.close()

    def second() -> Job:
        first_stored.wait(timeout=30)
        job, _ = actions.submit_job(world.member, JobRequest(**spec_fields))
        second_done.set()
        connection.close()
        return job

    with ThreadPoolExecutor(2) as pool:
        holder = pool.submit(first)
        waiter = pool.submit(second)
        holder.result(timeout=60)
        second_job = waiter.result(timeout=60)

    assert second_job.status == JobStatus.UNAPPROVED
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 1
