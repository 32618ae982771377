"""The compiled job representation answers exactly what DRF's generic path answers."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from backend.core.representation import compile_plan
from backend.jobs.api.serializers import JobSerializer
from backend.jobs.models import Job, JobStatus
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def generic(job: Job) -> dict:
    return serializers.ModelSerializer.to_representation(JobSerializer(job), job)


def test_job_serializer_is_compiled():
    assert compile_plan(JobSerializer()) is not None


def test_same_json_as_the_generic_path(world):
    now = timezone.now()
    JobFactory(owner=world.member, vc=world.vision, gpu_type=world.a100)
    JobFactory(
        owner=world.vc_admin,
        vc=world.vision,
        gpu_type=world.a100,
        status=JobStatus.RUNNING,
        env={"LR": "0.1"},
        placement=[{"node": "a100-1", "gpus": [0, 1], "cpus": 16.0, "memory": 1024}],
        cpus_per_worker=Decimal("12.5"),
        preemptible=True,
        priority=-3,
        started_at=now - timedelta(minutes=5),
    )
    JobFactory(
        owner=world.outsider,
        vc=world.nlp,
        gpu_type=world.cpu,
        gpus_per_worker=0,
        status=JobStatus.FAILED,
        exit_code=137,
        failure_class="infrastructure",
        failure_rule="signal",
        started_at=now - timedelta(hours=2),
        finished_at=now,
    )
    jobs = list(Job.objects.select_related("owner", "vc", "gpu_type"))
    for job in jobs:
        fast = JobSerializer(job).data
        assert list(fast) == list(generic(job))
        assert JSONRenderer().render(fast) == JSONRenderer().render(generic(job))
    page = JobSerializer(jobs, many=True).data
    assert JSONRenderer().render(page) == JSONRenderer().render([generic(job) for job in jobs])


def test_in_memory_values_answer_like_stored_ones(world):
    job = JobFactory(owner=world.member, vc=world.vision, gpu_type=world.a100)
    job.status = JobStatus.KILLING  # an enum member, not yet read back from the database
    job.finished_at = timezone.now()
    assert JSONRenderer().render(JobSerializer(job).data) == JSONRenderer().render(generic(job))


def test_a_job_of_no_array_needs_no_generic_path(world, monkeypatch):
    # A null relation on a field's path (array.array_id) answers None, as DRF would; it
    # used to send every single job back through the generic path, a third of a submit.
    job = JobFactory(owner=world.member, vc=world.vision, gpu_type=world.a100)
    expected = generic(job)

    def refuse(self, instance):
        raise AssertionError("the generic path was taken")

    monkeypatch.setattr(serializers.ModelSerializer, "to_representation", refuse)
    answer = JobSerializer(job).data
    assert answer["array"] is None
    assert JSONRenderer().render(answer) == JSONRenderer().render(expected)
