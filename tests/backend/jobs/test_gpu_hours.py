"""GPU-hours from what really ran: booked from attempts (running ones up to now), used
from the DCGM utilisation of exactly their GPUs in a real Prometheus, idle the rest,
borrowed work apart; scoped like everything else; CSV export."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from backend.jobmanager.scheduling import apply_resizes
from backend.jobs.models import FailureClass, JobAttempt, JobStatus, attempt_size
from jobmanager.core import Decisions, Resize, WorkerPlacement
from tests.backend.jobs_support import make_job
from tests.backend.repair_support import (  # noqa: F401 - the fixtures
    start_agents,
    start_prometheus,
    stop_at_end_fixture,
)
from tests.polling import wait_until

pytestmark = pytest.mark.django_db
URL = "/api/v1/usage/gpu-hours/"
T0 = datetime(2026, 11, 10, 20, 0, tzinfo=UTC)


def attempt(job, number, node, gpus, start, hours=None, **fields):
    return JobAttempt.objects.create(
        job=job, number=number, nodes=[node], gpus=[{"node": node, "gpus": gpus}],
        started_at=start, ended_at=None if hours is None else start + timedelta(hours=hours),
        **fields,
    )  # fmt: skip


@pytest.fixture
def ran(world):
    """From T0 (20:00) on. mia: 2 GPUs x 3 h finished (from 22:00); a job preempted after
    1 h on 4 GPUs, then running on 4 since T0 + 5 h; 1 borrowed GPU x 2 h. vera (vision):
    1 x 1 h. otto (nlp): 8 x 1 h."""
    finished = make_job(world, status=JobStatus.FINISHED, gpus_per_worker=2)
    attempt(finished, 1, "a100-1", [0, 1], T0 + timedelta(hours=2), 3)
    preempted = make_job(world, status=JobStatus.RUNNING, gpus_per_worker=4, attempt=2)
    attempt(preempted, 1, "a100-2", [0, 1, 2, 3], T0, 1, failure_class=FailureClass.PREEMPTION)
    attempt(preempted, 2, "a100-3", [4, 5, 6, 7], T0 + timedelta(hours=5))
    borrowed = make_job(world, status=JobStatus.FINISHED, preemptible=True)
    attempt(borrowed, 1, "a100-4", [7], T0, 2, borrowing=True)
    mine = make_job(world, owner=world.vc_admin, status=JobStatus.FINISHED)
    attempt(mine, 1, "a100-4", [0], T0, 1)
    other = make_job(world, owner=world.outsider, vc=world.nlp, status=JobStatus.FINISHED)
    attempt(other, 1, "a100-4", [0, 1, 2, 3, 4, 5, 6, 7], T0, 1)
    failed_deploy = make_job(world, status=JobStatus.FAILED)
    JobAttempt.objects.create(job=failed_deploy, number=1, started_at=T0, ended_at=T0)
    return {"finished": finished, "preempted": preempted, "borrowed": borrowed}


def rows(world, user, **params) -> list[dict]:
    response = world.client(user).get(URL, params)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def by_key(found: list[dict], field: str = "booked_gpu_hours") -> dict[str, float]:
    return {row["key"]: row[field] for row in found}


WINDOW = {"since": T0.isoformat(), "until": (T0 + timedelta(hours=8)).isoformat()}


def test_booked_hours_are_exactly_what_the_attempts_held(world, ran, settings):
    settings.TRAINYARD_PROMETHEUS_URL = ""
    found = rows(world, world.staff, group_by="user", **WINDOW)
    # mia: 2x3 + 4x1 (preempted) + 4x3 (running from T0+5h to the window's end) + 1x2
    assert by_key(found) == {"mia": 24, "vera": 1, "otto": 8}
    assert by_key(found, "borrowed_gpu_hours") == {"mia": 2, "vera": 0, "otto": 0}
    assert all(row["used_gpu_hours"] is None for row in found)
    assert all("TRAINYARD_PROMETHEUS_URL" in row["used_unavailable_reason"] for row in found)
    jobs = by_key(rows(world, world.staff, group_by="job", **WINDOW))
    assert jobs[ran["preempted"].job_id] == 4 + 12
    assert by_key(rows(world, world.staff, group_by="vc", **WINDOW)) == {"vision": 25, "nlp": 8}
    assert by_key(rows(world, world.staff, group_by="cluster", **WINDOW)) == {"cluster": 33}


def test_a_running_attempt_counts_up_to_now(world, settings):
    settings.TRAINYARD_PROMETHEUS_URL = ""
    job = make_job(world, status=JobStatus.RUNNING, gpus_per_worker=2)
    attempt(job, 1, "a100-1", [0, 1], timezone.now() - timedelta(minutes=90))
    (row,) = rows(world, world.member, group_by="job", since=T0.isoformat())
    assert row["booked_gpu_hours"] == pytest.approx(3, abs=0.01)


def test_daily_buckets_split_an_attempt_at_midnight(world, ran, settings):
    settings.TRAINYARD_PROMETHEUS_URL = ""
    found = rows(world, world.member, group_by="user", bucket="day", **WINDOW)
    # from 22:00: 2x3 h -> 4 before midnight, 2 after; from 20:00 preempted 4x1 before; the
    # running one from 01:00 to 04:00 (4x3) after; borrowed 1x2 before.
    assert [(row["bucket"], row["booked_gpu_hours"]) for row in found] == [
        ("2026-11-10", 4 + 4 + 2),
        ("2026-11-11", 2 + 12),
    ]
    monthly = rows(world, world.member, group_by="user", bucket="month", **WINDOW)
    assert [(row["bucket"], row["booked_gpu_hours"]) for row in monthly] == [("2026-11", 24)]


def test_each_sees_their_own_a_vc_admin_their_vc_a_cluster_admin_all(world, ran, settings):
    settings.TRAINYARD_PROMETHEUS_URL = ""
    assert by_key(rows(world, world.member, group_by="user", **WINDOW)) == {"mia": 24}
    assert by_key(rows(world, world.vc_admin, group_by="user", **WINDOW)) == {"mia": 24, "vera": 1}
    assert by_key(rows(world, world.outsider, group_by="vc", **WINDOW)) == {"nlp": 8}
    in_vision = rows(world, world.staff, group_by="user", vc="vision", **WINDOW)
    assert by_key(in_vision) == {"mia": 24, "vera": 1}
    assert rows(world, world.member, group_by="user", vc="nlp", **WINDOW) == []  # not theirs
    assert world.client(None).get(URL).status_code in (401, 403)


def test_the_csv_export_has_the_same_rows(world, ran, settings):
    settings.TRAINYARD_PROMETHEUS_URL = ""
    response = world.client(world.staff).get(f"{URL}export/", {"group_by": "vc", **WINDOW})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(row["key"], float(row["booked_gpu_hours"])) for row in table] == [
        ("nlp", 8),
        ("vision", 25),
    ]
    assert table[0]["used_gpu_hours"] == ""  # unknown, not zero


def test_bad_parameters_are_field_errors(world):
    client = world.client(world.member)
    response = client.get(URL, {"group_by": "planet", "bucket": "week"})
    assert response.status_code == 400
    assert {"group_by", "bucket"} <= set(response.json())
    backwards = client.get(URL, {"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"})
    assert backwards.status_code == 400 and "since" in backwards.json()
    assert client.get(URL, {"since": "yesterday"}).status_code == 400


@pytest.mark.integration
def test_used_hours_follow_the_utilisation_of_exactly_the_jobs_gpus(
    world, settings, tmp_path, stop_at_end
):
    (agent,) = start_agents(tmp_path, ["a100-1"], gpus=8)
    stop_at_end.append(agent)
    agent.inject({"gpus": {"2": {"DCGM_FI_DEV_GPU_UTIL": 25}, "3": {"DCGM_FI_DEV_GPU_UTIL": 25},
                           "4": {"DCGM_FI_DEV_GPU_UTIL": 90}}})  # fmt: skip
    prometheus = start_prometheus(tmp_path / "prometheus", [agent.target])
    stop_at_end.append(prometheus)
    settings.TRAINYARD_PROMETHEUS_URL = prometheus.url
    job = make_job(world, status=JobStatus.RUNNING, gpus_per_worker=2)
    attempt(job, 1, "a100-1", [2, 3], timezone.now() - timedelta(minutes=30))
    busy = make_job(world, status=JobStatus.RUNNING)
    attempt(busy, 1, "a100-1", [4], timezone.now() - timedelta(minutes=30))
    query = 'DCGM_FI_DEV_GPU_UTIL{gpu="3"}'
    wait_until(lambda: prometheus.sees(f"count_over_time({query}[1m])", 2), 30, "two scrapes")

    found = {row["key"]: row for row in rows(world, world.member, group_by="job")}

    mine = found[job.job_id]
    assert mine["booked_gpu_hours"] == pytest.approx(1, abs=0.01)
    assert mine["used_gpu_hours"] == pytest.approx(0.25 * mine["booked_gpu_hours"], abs=1e-3)
    assert mine["idle_gpu_hours"] == pytest.approx(0.75 * mine["booked_gpu_hours"], abs=1e-3)
    other = found[busy.job_id]
    assert other["used_gpu_hours"] == pytest.approx(0.9 * other["booked_gpu_hours"], abs=1e-3)

    prometheus.stop()
    (gone,) = rows(world, world.member, group_by="job", job=job.job_id)
    assert gone["used_gpu_hours"] is None
    assert "cannot be read now" in gone["used_unavailable_reason"]


def test_an_elastic_job_grown_is_booked_and_borrowed_as_it_was_sized(world, settings):
    """A 2..4 job of one GPU a worker, started at 2 three hours ago and grown to 4 by the
    scheduler an hour later: 2x1 + 4x2 booked, its 2 workers above min_workers borrowed
    for 2 hours."""
    settings.TRAINYARD_PROMETHEUS_URL = ""
    start = timezone.now() - timedelta(hours=3)
    on = [{"node": "a100-1", "gpus": [gpu]} for gpu in (0, 1)]
    job = make_job(world, status=JobStatus.RUNNING, workers=2, min_workers=2, max_workers=4,
                   placement=on)  # fmt: skip
    JobAttempt.objects.create(
        job=job, number=job.attempt, nodes=["a100-1"], gpus=on, started_at=start,
        sizes=[attempt_size(job, start)],
    )  # fmt: skip
    grown = tuple(WorkerPlacement("a100-1", (gpu,), 1000, 1 << 30) for gpu in range(4))
    decisions = Decisions(resizes=[Resize(job.job_id, grown, workers_from=2, reason="")])
    with transaction.atomic():
        assert apply_resizes(decisions, start + timedelta(hours=1)) == [job.pk]

    (row,) = rows(world, world.member, group_by="job", job=job.job_id, since=T0.isoformat())
    assert row["booked_gpu_hours"] == pytest.approx(2 * 1 + 4 * 2, abs=0.01)
    assert row["borrowed_gpu_hours"] == pytest.approx(2 * 2, abs=0.01)
    # Cut at the resize: the first hour alone is 2 GPU-hours booked, none borrowed.
    first_hour = {"since": start.isoformat(), "until": (start + timedelta(hours=1)).isoformat()}
    (early,) = rows(world, world.member, group_by="job", job=job.job_id, **first_hour)
    assert (early["booked_gpu_hours"], early["borrowed_gpu_hours"]) == (2, 0)


def test_an_attempt_recorded_without_sizes_keeps_its_start_size(world, ran, settings):
    """Attempts from before sizes were kept: their GPUs at the start, borrowed all or none."""
    settings.TRAINYARD_PROMETHEUS_URL = ""
    assert all(one.sizes == [] for one in JobAttempt.objects.all())
    jobs = rows(world, world.staff, group_by="job", **WINDOW)
    assert by_key(jobs)[ran["borrowed"].job_id] == 2
    assert by_key(jobs, "borrowed_gpu_hours")[ran["borrowed"].job_id] == 2
    assert by_key(jobs, "borrowed_gpu_hours")[ran["preempted"].job_id] == 0
