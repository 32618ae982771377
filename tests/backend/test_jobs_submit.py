"""Submitting jobs: defaults, validation rules, idempotency, durability of the answer."""

from __future__ import annotations

import pytest

from backend.jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def submit(client, **fields):
    body = {"vc": "vision", "command": "python train.py", "gpu_type": "A100"} | fields
    return client.post(JOBS, body, format="json")


def test_submission_is_stored_with_t_shirt_defaults(world):
    response = submit(world.client(world.member), name="resnet", workers=2, gpus_per_worker=4)

    assert response.status_code == 201, response.json()
    answer = response.json()
    job = Job.objects.get(job_id=answer["id"])
    assert answer["status"] == "queued"
    assert (job.cpus_per_worker, job.memory_per_worker) == (32, 4 * 64 * 1024)
    assert job.max_wall_time == world.vision.max_wall_time
    assert job.max_retries == world.vision.default_max_retries
    assert [e.to_status for e in job.events.all()] == [JobStatus.QUEUED]


def test_memory_quantity_is_answered_in_mib(world):
    response = submit(world.client(world.member), memory_per_worker="48Gi")

    assert response.status_code == 201, response.json()
    assert response.json()["memory_per_worker"] == 48 * 1024
