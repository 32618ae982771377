"""Elastic jobs in the live job manager (issue 34): started at their minimum, grown into
free GPUs, shrunk for a guaranteed job of their VC, each resize an event and a count.

The memory backend stands in for the cluster (it resizes at once); one 8-GPU node is
schedulable, so that sizes are what the GPUs allow.
"""

from __future__ import annotations

import pytest

from backend.jobs.models import Job, JobStatus
from jobmanager.backends.memory import MemoryBackend
from tests.backend import elastic_support
from tests.backend.jobs_support import JOBS, JobManager, job_url

pytestmark = pytest.mark.django_db
backend, one_node = elastic_support.backend, elastic_support.one_node  # the fixtures


def submit(world, **spec) -> Job:
    body = {"vc": "vision", "gpu_type": "A100", "command": "torchrun train.py"} | spec
    response = world.client(world.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def page(world, job: Job) -> dict:
    return world.client(world.member).get(job_url(job)).json()


def borrowed_gpus(world) -> int:
    resources = world.client(world.vc_admin).get("/api/v1/vcs/vision/").json()["resources"]
    return next(row["borrowed_gpus"] for row in resources if row["gpu_type"] == "A100")


def test_an_elastic_job_starts_small_grows_into_freed_gpus_and_shrinks_for_its_vc(
    world, one_node, backend, redis_namespace
):
    jobs = JobManager(backend)
    other = submit(world, workers=1, gpus_per_worker=4)
    jobs.run()
    elastic = submit(world, workers=2, min_workers=2, max_workers=4, gpus_per_worker=2)
    jobs.run()

    shown = page(world, elastic)
    assert (shown["status"], shown["workers"], shown["resizes"]) == ("running", 2, 0)
    assert len(backend.deployed()[elastic.job_id]["workers"]) == 2

    backend.finish(other.job_id)
    jobs.run()

    shown = page(world, elastic)
    assert (shown["workers"], shown["resizes"]) == (4, 1)
    assert len(shown["placement"]) == 4
    assert [w["rank"] for w in backend.deployed()[elastic.job_id]["workers"]] == [0, 1, 2, 3]
    assert elastic.events.last().reason == "resized from 2 to 4 workers: GPUs free"
    # Its two workers above min_workers are borrowed, preemptible capacity.
    assert borrowed_gpus(world) == 4

    guaranteed = submit(world, workers=1, gpus_per_worker=4, command="python eval.py")
    jobs.run()

    assert page(world, guaranteed)["status"] == "running"
    shown = page(world, elastic)
    assert (shown["status"], shown["workers"], shown["resizes"]) == ("running", 2, 2)
    assert [w["rank"] for w in backend.deployed()[elastic.job_id]["workers"]] == [0, 1]
    assert elastic.events.last().reason == (
        f"shrunk from 4 to 2 workers: guaranteed job {guaranteed.job_id} of VC vision "
        "needed its GPUs"
    )
    assert borrowed_gpus(world) == 0
    # Resized, never restarted: one attempt throughout, its sizes kept for GPU-hours
    # (GPUs, borrowed GPUs): at its start, grown, shrunk.
    (attempt,) = elastic.attempts.all()
    assert attempt.number == 1
    assert [(size["gpus"], size["borrowed"]) for size in attempt.sizes] == [(4, 0), (8, 4), (4, 0)]


def test_a_backend_that_does_not_resize_runs_an_elastic_job_at_its_size(
    world, one_node, backend, redis_namespace, monkeypatch
):
    monkeypatch.setattr(MemoryBackend, "resizes", False)
    jobs = JobManager(backend)
    other = submit(world, workers=1, gpus_per_worker=4)
    elastic = submit(world, workers=4, min_workers=2, max_workers=4, gpus_per_worker=2)
    jobs.run()

    # Not started at 2 on the 4 free GPUs: it waits for its 4 workers' 8.
    assert page(world, elastic)["status"] == "queued"
    backend.finish(other.job_id)
    jobs.run()

    shown = page(world, elastic)
    assert (shown["status"], shown["workers"], shown["resizes"]) == ("running", 4, 0)
    placed = elastic.events.get(to_status=JobStatus.SCHEDULING).reason
    assert placed.endswith("runs at a fixed 4 workers: this cluster's backend does not resize jobs")
