"""Submitting elastic jobs (min_workers..max_workers): defaults, the range's rules, the
warning for a job that shows no checkpointing (issue 34)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.jobs.elastic import RESIZE_WITHOUT_CHECKPOINT
from backend.jobs.models import Job
from tests.backend.jobs_support import JOBS, submit

pytestmark = pytest.mark.django_db


def test_a_job_of_fixed_size_has_its_workers_at_both_ends_of_its_range(world):
    answer = submit(world.client(world.member), workers=2).json()

    assert (answer["workers"], answer["min_workers"], answer["max_workers"]) == (2, 2, 2)
    assert answer["warnings"] == []


def test_an_elastic_job_asks_for_its_max_and_is_stored_with_its_range(world):
    client = world.client(world.member)
    response = submit(client, command="torchrun train.py --resume", min_workers=2, max_workers=4)

    assert response.status_code == 201, response.json()
    answer = response.json()
    job = Job.objects.get(job_id=answer["id"])
    assert (job.workers, job.min_workers, job.max_workers) == (4, 2, 4)
    assert answer["warnings"] == []
    assert client.get(f"{JOBS}{job.job_id}/").json()["max_workers"] == 4


def test_an_elastic_job_without_checkpoints_is_accepted_with_a_warning(world):
    response = submit(
        world.client(world.member), command="python train.py", min_workers=1, max_workers=2
    )

    assert response.status_code == 201, response.json()
    assert response.json()["warnings"] == [RESIZE_WITHOUT_CHECKPOINT]
    assert "restarts it from the beginning" in RESIZE_WITHOUT_CHECKPOINT


def test_a_bad_range_is_named_with_every_other_mistake_in_one_answer(world):
    past = (timezone.now() - timedelta(minutes=1)).isoformat()
    response = submit(
        world.client(world.member), min_workers=4, max_workers=2, deadline=past, priority=5
    )

    assert response.status_code == 400, response.content
    errors = response.json()
    assert sorted(errors) == ["deadline", "max_workers", "min_workers", "priority"]
    assert errors["min_workers"] == ["min_workers (4) is above max_workers (2)."]
    assert errors["deadline"] == ["The deadline has passed."]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "fields",
    [
        {"workers": 5, "min_workers": 2, "max_workers": 4},
        {"workers": 1, "min_workers": 2, "max_workers": 3},
    ],
    ids=["above max", "below min"],
)
def test_workers_outside_the_range_are_refused(world, fields):
    response = submit(world.client(world.member), **fields)

    assert response.status_code == 400, response.content
    assert "must lie within min_workers..max_workers" in response.json()["workers"][0]


def test_a_range_field_of_the_wrong_kind_is_named(world):
    response = submit(world.client(world.member), min_workers=0, max_workers="many")

    assert response.status_code == 400, response.content
    assert sorted(response.json()) == ["max_workers", "min_workers"]


def test_the_quota_guarantees_min_workers_only(world):
    # VC vision's A100 quota (the world fixture) is 16 GPUs, below 8 workers of 8; an elastic
    # job whose minimum fits is accepted, its extra workers to be borrowed.
    response = submit(
        world.client(world.member),
        command="torchrun train.py",
        gpus_per_worker=8,
        min_workers=1,
        max_workers=8,
    )

    assert response.status_code == 201, response.json()
