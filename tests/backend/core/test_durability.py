"""An acknowledged job survives the web process dying right after it answered."""

from __future__ import annotations

import signal

import pytest
import requests

from backend.accounts.actions import create_api_token
from backend.jobs.models import Job, JobStatus
from tests.servers import kill_process_group, start_gunicorn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_acknowledged_job_survives_web_server_being_killed(world):
    _, token = create_api_token(world.member, "durability")
    server, base_url = start_gunicorn()
    try:
        response = requests.post(
            f"{base_url}/api/v1/jobs/",
            json={"vc": "vision", "gpu_type": "A100", "command": "python train.py"},
            headers={"Authorization": f"Token {token}"},
            timeout=30,
        )
    finally:
        # SIGKILL to master and workers: no shutdown hook, nothing flushed after the answer.
        kill_process_group(server, signal.SIGKILL)

    assert response.status_code == 201, response.text
    job = Job.objects.get(job_id=response.json()["id"])
    assert job.status == JobStatus.QUEUED
    assert job.owner == world.member
    assert job.events.count() == 1
