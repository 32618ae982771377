"""One request from the submission to the stored job, and one codec for where a job's
workers are placed (Job.placement, JobAttempt.gpus)."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from backend.jobs.job_request import JobRequest, job_request_of
from backend.jobs.models import (
    Job,
    JobAttempt,
    JobStatus,
    WorkerGpus,
    attempt_gpus_from_json,
    attempt_gpus_to_json,
    placement_from_json,
    placement_to_json,
)
from jobmanager.core import WorkerPlacement

pytestmark = pytest.mark.django_db

PLACED = (
    WorkerPlacement(node="a100-1", gpus=(0, 1), millicpus=16_500, memory=4096),
    WorkerPlacement(node="a100-2", gpus=(4, 5), millicpus=16_500, memory=4096),
)


def test_every_field_of_a_request_is_the_stored_jobs(world):
    request = JobRequest(
        vc=world.vision, gpu_type=world.a100, name="resnet", type="distributed",
        command="torchrun train.py", workers=2, min_workers=1, max_workers=4,
        gpus_per_worker=2, cpus_per_worker=Decimal("8.5"), memory_per_worker=2048,
        max_retries=1, max_wall_time=3600, retry_on="any", image="pytorch/pytorch:2.4",
        working_dir="/work", env={"LR": "0.1"}, data_path="/data", output_path="/out",
        node_selector={"zone": "b"}, whole_nodes=True, same_switch=True,
        ports=({"name": "jupyter", "port": 8888},), preemptible=True, priority=5,
        deadline=datetime(2027, 1, 1, tzinfo=UTC), throughput=(10.0, 19.0), work=1e6,
        admission="meets", admission_share=2, earliest_finish=datetime(2026, 12, 31, tzinfo=UTC),
    )  # fmt: skip

    job = Job.from_request(world.member, request)
    job.save()
    stored = Job.objects.get(pk=job.pk)

    for field in fields(JobRequest):
        asked = getattr(request, field.name)
        expected = {
            "env": dict, "node_selector": dict, "ports": lambda ports: [dict(p) for p in ports],
            "throughput": list,
        }.get(field.name, lambda value: value)(asked)  # fmt: skip
        assert getattr(stored, field.name) == expected, field.name
    assert stored.status == JobStatus.QUEUED and stored.owner == world.member


def test_a_request_waiting_for_approval_says_why(world):
    request = job_request_of({"vc": world.vision, "command": "python train.py"}, world.a100, 1)

    job = Job.from_request(world.member, request, "over the per-user limit")

    assert job.status == JobStatus.UNAPPROVED
    assert job.status_message == "over the per-user limit"


def test_a_submission_left_to_its_defaults_gets_the_vcs_and_the_gpu_types_sizes(world):
    submitted = {"vc": world.vision, "command": "/usr/bin/python3 train.py", "max_workers": 3}

    request = job_request_of(submitted, world.a100, 2)

    assert (request.workers, request.min_workers, request.max_workers) == (3, 3, 3)
    assert request.cpus_per_worker == world.a100.cpus_per_gpu * 2
    assert request.memory_per_worker == world.a100.memory_per_gpu * 2
    assert request.max_wall_time == world.vision.max_wall_time
    assert request.max_retries == world.vision.default_max_retries
    assert request.name == "python3"


def test_a_placement_reads_back_as_it_was_written():
    stored = placement_to_json(PLACED)

    assert stored[1] == {"rank": 1, "node": "a100-2", "gpus": [4, 5], "cpus": 16.5,
                         "memory": 4096}  # fmt: skip
    assert placement_from_json(stored) == PLACED


def test_an_attempt_counts_and_lists_the_gpus_its_placement_held(world):
    job = Job.from_request(
        world.member,
        job_request_of({"vc": world.vision, "command": "true"}, world.a100, 2),
        placement=placement_to_json(PLACED),
    )
    job.save()
    attempt = JobAttempt.objects.create(
        job=job, number=1, nodes=job.placed_nodes, gpus=attempt_gpus_to_json(job.placed_workers)
    )

    stored = JobAttempt.objects.get(pk=attempt.pk)

    assert stored.placed_gpus == (WorkerGpus("a100-1", (0, 1)), WorkerGpus("a100-2", (4, 5)))
    assert stored.gpu_count == 4
    assert attempt_gpus_from_json(None) == ()
