"""Backfill's run-time estimates follow the jobs that finish, round after round."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.jobs.estimates import learned_run_times
from backend.jobs.models import Job, JobStatus
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def finished(world, seconds: float, ended_ago: timedelta = timedelta(hours=1)) -> Job:
    ended = timezone.now() - ended_ago
    return JobFactory(
        owner=world.member, vc=world.vision, gpu_type=world.a100, status=JobStatus.FINISHED,
        started_at=ended - timedelta(seconds=seconds), finished_at=ended,
    )  # fmt: skip


def estimate(world) -> float | None:
    return learned_run_times().estimate(world.vision.name, world.member.username, 1)


def test_jobs_finishing_between_rounds_are_learned_each_once(world):
    finished(world, 100)
    assert estimate(world) == 100

    finished(world, 300)  # recorded after the last round, though it ended earlier
    assert estimate(world) == 200
    assert estimate(world) == 200  # a round with nothing new learns nothing twice


def test_a_purged_history_is_learned_afresh(world):
    first = finished(world, 100)
    assert estimate(world) == 100

    Job.objects.filter(pk=first.pk).delete()
    finished(world, 40)
    assert estimate(world) == 40


def test_no_history_no_estimate(world):
    assert estimate(world) is None
    finished(world, 60)
    assert estimate(world) == 60
