"""What the scheduler reads of jobs' past runs: attained service across attempts, and each
member's usage decayed with the VC's half-life (backend/jobs/history.py)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.utils import timezone

from backend.jobs import history
from backend.jobs.history import decayed_gpu_seconds
from backend.jobs.models import JobAttempt, JobStatus
from backend.jobs.snapshot import load_snapshot
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

HOUR = 3600.0


def ran(job, number: int, hours_ago: float, hours: float) -> None:
    ended = timezone.now() - timedelta(hours=hours_ago)
    JobAttempt.objects.create(
        job=job, number=number, started_at=ended - timedelta(hours=hours), ended_at=ended
    )


def test_a_run_a_half_life_ago_counts_half_and_one_now_counts_whole():
    now = timezone.now()
    hour = timedelta(hours=1)
    recent = decayed_gpu_seconds(8, now - hour / 3600, now, now, half_life=HOUR)
    assert recent == pytest.approx(8.0, rel=1e-3)
    old = decayed_gpu_seconds(8, now - 2 * hour - hour / 3600, now - 2 * hour, now, HOUR)
    assert old == pytest.approx(2.0, rel=1e-3)
    # A whole hour, ended now: 8 GPUs x the integral of 2^-t over one half-life.
    assert decayed_gpu_seconds(8, now - hour, now, now, HOUR) == pytest.approx(
        8 * HOUR / (2 * math.log(2))
    )


def test_a_requeued_job_carries_every_ended_attempt_and_waits_since_the_last(world):
    job = JobFactory(
        vc=world.vision, gpu_type=world.a100, workers=2, gpus_per_worker=4, attempt=2,
        status=JobStatus.QUEUED,
    )  # fmt: skip
    ran(job, 1, hours_ago=5, hours=2)
    ran(job, 2, hours_ago=1, hours=1)
    fresh = JobFactory(vc=world.vision, gpu_type=world.a100, status=JobStatus.QUEUED)

    queued = {queued.id: queued for queued in load_snapshot().queued}

    assert queued[job.job_id].attained == pytest.approx(8 * 3 * HOUR, rel=1e-6)
    ended = (timezone.now() - timedelta(hours=1)).timestamp()
    assert queued[job.job_id].waiting_from == pytest.approx(ended, abs=5)
    assert (queued[fresh.job_id].attained, queued[fresh.job_id].waiting_since) == (0.0, None)


@pytest.mark.parametrize("policy", ["FS", "LAS"])
def test_fair_share_usage_fades_with_the_vcs_half_life(world, policy):
    """Under fair share, and under LAS (which shares fairly within its queues)."""
    world.vision.policy = policy
    world.vision.save()
    job = JobFactory(
        owner=world.member, vc=world.vision, gpu_type=world.a100, gpus_per_worker=8,
        status=JobStatus.FINISHED,
    )  # fmt: skip
    ran(job, 1, hours_ago=24, hours=1)

    week = load_snapshot().usage[("vision", world.member.username)]
    world.vision.usage_half_life_hours = 1
    world.vision.save()
    hour = load_snapshot().usage.get(("vision", world.member.username), 0.0)

    # A day-old hour on 8 GPUs: most of it under a week's half-life, nearly none under 1 h.
    assert 0.8 * 8 * HOUR < week < 8 * HOUR
    assert hour < 8 * HOUR * 2**-20


def test_a_vc_admin_sets_the_half_life_and_a_bad_one_is_refused_by_name(world):
    client = world.client(world.vc_admin)
    answer = client.patch("/api/v1/vcs/vision/", {"usage_half_life_hours": 24}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["usage_half_life_hours"] == 24
    answer = client.patch("/api/v1/vcs/vision/", {"usage_half_life_hours": 0}, format="json")
    assert answer.status_code == 400
    assert "usage_half_life_hours" in answer.json()


def test_a_vc_admin_sets_the_wait_limit_the_scheduler_reads_and_a_bad_one_is_refused(world):
    client = world.client(world.vc_admin)
    assert client.get("/api/v1/vcs/vision/").json()["wait_limit_hours"] is None

    answer = client.patch("/api/v1/vcs/vision/", {"wait_limit_hours": 12}, format="json")

    assert answer.status_code == 200, answer.json()
    assert answer.json()["wait_limit_hours"] == 12
    vcs = {vc.name: vc for vc in load_snapshot().vcs}
    assert vcs["vision"].wait_limit == 12 * HOUR
    for bad in (0, -1, "a day"):
        answer = client.patch("/api/v1/vcs/vision/", {"wait_limit_hours": bad}, format="json")
        assert answer.status_code == 400
        assert "wait_limit_hours" in answer.json()
    answer = client.patch("/api/v1/vcs/vision/", {"wait_limit_hours": None}, format="json")
    assert answer.status_code == 200, answer.json()
    assert {vc.name: vc for vc in load_snapshot().vcs}["vision"].wait_limit is None


def test_usage_kept_between_passes_equals_a_reading_of_the_whole_history(world, monkeypatch):
    """A process keeps the sums between passes (decayed, with the attempts ended since);
    they equal a reading of every attempt, also once an attempt is written with an end
    earlier than those already read, which has the whole history read again."""
    world.vision.policy = "FS"
    world.vision.save()
    monkeypatch.setattr(history, "_usage", None)
    readings = []
    whole_reading = history._Usage.read

    def counted(cls, *arguments):
        readings.append(arguments)
        return whole_reading(*arguments)

    monkeypatch.setattr(history._Usage, "read", classmethod(counted))

    def usage() -> dict[tuple[str, str], float]:
        return history.decayed_usage(timezone.now())

    def read_afresh() -> dict[tuple[str, str], float]:
        history._usage = None
        return usage()

    def finished(owner):
        return JobFactory(
            owner=owner, vc=world.vision, gpu_type=world.a100, gpus_per_worker=8,
            status=JobStatus.FINISHED,
        )  # fmt: skip

    ran(finished(world.member), 1, hours_ago=24, hours=1)
    assert set(usage()) == {("vision", world.member.username)}
    assert len(readings) == 1

    ran(finished(world.vc_admin), 1, hours_ago=0, hours=2)  # ends now
    kept = usage()
    assert len(readings) == 1  # brought up to date, not read again
    assert kept == pytest.approx(read_afresh(), rel=1e-6)
    assert kept[("vision", world.vc_admin.username)] > kept[("vision", world.member.username)]

    ran(finished(world.outsider), 1, hours_ago=5, hours=1)  # ended before the last one read
    readings.clear()
    kept = usage()
    assert len(readings) == 1
    assert ("vision", world.outsider.username) in kept
    assert kept == pytest.approx(read_afresh(), rel=1e-6)
