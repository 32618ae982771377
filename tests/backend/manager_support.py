"""The job manager's tests on the memory backend: a job submitted over REST, as a member of
vision asks for one GPU of an A100 node unless told otherwise."""

from __future__ import annotations

from backend.jobs.models import Job
from tests.backend.jobs_support import JOBS


def submit(world, user=None, **spec) -> Job:
    body = {"vc": "vision", "gpu_type": "A100", "command": "python train.py", "gpus_per_worker": 1}
    body |= spec
    response = world.client(user or world.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])
