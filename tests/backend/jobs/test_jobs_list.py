"""Listing jobs: filters, ordering, pagination, and refusing filter values that mean nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.jobs.models import JobStatus, JobType
from tests.backend.jobs_support import JOBS, make_job

pytestmark = pytest.mark.django_db


def listed_ids(response) -> list[str]:
    assert response.status_code == 200, response.json()
    return [job["id"] for job in response.json()["results"]]


def test_list_is_paginated(world):
    jobs = [make_job(world) for _ in range(3)]
    client = world.client(world.member)

    first = client.get(JOBS, {"page_size": 2}).json()
    second = client.get(first["next"]).json()

    assert set(first) == {"count", "next", "previous", "results"}
    assert (first["count"], len(first["results"]), first["previous"]) == (3, 2, None)
    assert (len(second["results"]), second["next"]) == (1, None)
    assert second["previous"] is not None
    listed = {job["id"] for job in first["results"] + second["results"]}
    assert listed == {job.job_id for job in jobs}


def test_list_is_newest_first(world):
    now = timezone.now()
    old = make_job(world, submitted_at=now - timedelta(hours=2))
    new = make_job(world, submitted_at=now)
    middle = make_job(world, submitted_at=now - timedelta(hours=1))

    ids = listed_ids(world.client(world.member).get(JOBS))

    assert ids == [new.job_id, middle.job_id, old.job_id]


@pytest.mark.parametrize("ordering", ["priority", "-priority"])
def test_list_orders_by_priority(world, ordering):
    low, high = make_job(world, priority=-5), make_job(world, priority=5)

    ids = listed_ids(world.client(world.member).get(JOBS, {"ordering": ordering}))

    expected = [low.job_id, high.job_id]
    assert ids == (expected if ordering == "priority" else expected[::-1])


def test_list_orders_by_name(world):
    for name in ("b", "c", "a"):
        make_job(world, name=name)

    response = world.client(world.member).get(JOBS, {"ordering": "name"})

    assert [job["name"] for job in response.json()["results"]] == ["a", "b", "c"]


def test_list_filters_by_vc(world):
    make_job(world)
    nlp_job = make_job(world, owner=world.outsider, vc=world.nlp)

    ids = listed_ids(world.client(world.staff).get(JOBS, {"vc": "nlp"}))

    assert ids == [nlp_job.job_id]


def test_list_filters_by_several_statuses(world):
    queued = make_job(world, status=JobStatus.QUEUED)
    running = make_job(world, status=JobStatus.RUNNING)
    make_job(world, status=JobStatus.FINISHED)

    response = world.client(world.member).get(JOBS, {"status": ["queued", "running"]})

    assert sorted(listed_ids(response)) == sorted([queued.job_id, running.job_id])


def test_list_filters_by_owner(world):
    mine = make_job(world, owner=world.vc_admin)
    make_job(world, owner=world.member)

    ids = listed_ids(world.client(world.vc_admin).get(JOBS, {"owner": "vera"}))

    assert ids == [mine.job_id]


def test_list_filters_by_type(world):
    notebook = make_job(world, type=JobType.INTERACTIVE)
    make_job(world, type=JobType.BATCH)

    ids = listed_ids(world.client(world.member).get(JOBS, {"type": "interactive"}))

    assert ids == [notebook.job_id]


def test_filter_matching_nothing_is_an_empty_page(world):
    make_job(world)

    response = world.client(world.member).get(JOBS, {"vc": "nowhere"})

    assert response.json() == {"count": 0, "next": None, "previous": None, "results": []}


@pytest.mark.parametrize(
    ("params", "field"),
    [({"status": "sleeping"}, "status"), ({"type": "quantum"}, "type")],
)
def test_invalid_filter_value_is_a_bad_request(world, params, field):
    response = world.client(world.member).get(JOBS, params)

    assert response.status_code == 400
    assert "is not one of the available choices" in response.json()[field][0]


def test_page_past_the_end_is_not_found(world):
    make_job(world)

    response = world.client(world.member).get(JOBS, {"page": 5})

    assert response.status_code == 404


@pytest.mark.parametrize("jobs", [0, 1, 2, 3, 5])
def test_count_and_pages_hold_around_a_full_first_page(world, jobs):
    for _ in range(jobs):
        make_job(world, owner=world.member)
    client = world.client(world.member)

    first = client.get(JOBS, {"page_size": 2}).json()
    seen = listed_ids(client.get(JOBS, {"page_size": 2}))
    next_url = first["next"]
    while next_url:
        page = client.get(next_url).json()
        assert page["count"] == jobs
        seen += [job["id"] for job in page["results"]]
        next_url = page["next"]

    assert first["count"] == jobs
    assert (first["next"] is not None) == (jobs > 2)
    assert len(seen) == len(set(seen)) == jobs


def test_list_shows_summaries_and_the_detail_shows_the_whole_job(world):
    job = make_job(world, owner=world.member, env={"WANDB_API_KEY": "secret"}, command="train")
    client = world.client(world.member)

    [summary] = client.get(JOBS).json()["results"]
    detail = client.get(f"{JOBS}{job.job_id}/").json()

    assert {"command", "env", "placement", "insight_message"}.isdisjoint(summary)
    assert (detail["command"], detail["env"]) == ("train", {"WANDB_API_KEY": "secret"})
    assert summary == {name: detail[name] for name in summary}
