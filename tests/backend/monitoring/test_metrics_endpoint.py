"""GET /metrics: who may scrape it, and gauges that agree with the database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from backend.clusters.models import RepairState
from backend.jobs.actions import kill_job
from backend.jobs.models import JobStatus
from tests.backend.jobs_support import make_job
from tests.backend.metrics_support import (
    scrape,
    scrape_token,  # noqa: F401 (fixtures)
)

pytestmark = pytest.mark.django_db


def test_the_gauges_count_what_the_database_holds(world):
    for _ in range(3):
        make_job(world, status=JobStatus.QUEUED)
    on = [{"node": "a100-2", "gpus": [0, 1, 2, 3]}, {"node": "a100-3", "gpus": [0, 1, 2, 3]}]
    make_job(world, status=JobStatus.RUNNING, workers=2, gpus_per_worker=4, placement=on)
    on = [{"node": "a100-2", "gpus": [4, 5]}]
    make_job(world, status=JobStatus.RUNNING, gpus_per_worker=2, borrowing=True, placement=on)
    on = [{"node": "a100-1", "gpus": [7]}]  # on the node taken out: not free GPUs it holds
    make_job(world, status=JobStatus.KILLING, placement=on)
    make_job(world, owner=world.outsider, vc=world.nlp, status=JobStatus.FINISHED)
    waiting = make_job(world, status=JobStatus.QUEUED)
    waiting.queued_at = timezone.now() - timedelta(hours=2)
    waiting.save()
    world.nlp.queue_wait_alert_minutes = None  # no alert for nlp
    world.nlp.save()
    node = world.nodes[0]
    node.repair_state = RepairState.OUT_OF_POOL
    node.save()

    got = scrape()

    jobs = "trainyard_jobs"
    assert got[(jobs, (("gpu_type", "A100"), ("status", "queued"), ("vc", "vision")))] == 4
    assert got[(jobs, (("gpu_type", "A100"), ("status", "running"), ("vc", "vision")))] == 2
    # Ended jobs are counted as they end (trainyard_jobs_ended_total), not kept as a gauge
    assert not any(name == jobs and ("status", "finished") in labels for name, labels in got)
    gpus = "trainyard_gpus"
    assert got[(gpus, (("gpu_type", "A100"), ("state", "used"), ("vc", "vision")))] == 9
    assert got[(gpus, (("gpu_type", "A100"), ("state", "borrowed"), ("vc", "vision")))] == 2
    # 4 nodes of 8: one out of the pool, 10 of the other 24 held (and 1 on the one out)
    assert got[(gpus, (("gpu_type", "A100"), ("state", "out_of_service"), ("vc", "")))] == 8
    assert got[(gpus, (("gpu_type", "A100"), ("state", "free"), ("vc", "")))] == 14
    oldest = got[("trainyard_queue_oldest_wait_seconds", (("vc", "vision"),))]
    assert 7200 <= oldest < 7300
    assert got[("trainyard_queue_oldest_wait_seconds", (("vc", "nlp"),))] == 0
    assert got[("trainyard_queue_wait_threshold_seconds", (("vc", "vision"),))] == 240 * 60
    nodes = "trainyard_nodes"
    assert got[(nodes, (("gpu_type", "A100"), ("repair_state", "out_of_pool")))] == 1
    assert got[(nodes, (("gpu_type", "A100"), ("repair_state", "in_service")))] == 3
    assert ("trainyard_queue_wait_threshold_seconds", (("vc", "nlp"),)) not in got
    assert got[("trainyard_database_up", ())] == 1


def test_an_elastic_jobs_workers_above_min_workers_are_borrowed_gpus(world):
    """A 2..4 job grown to 4 workers of 2 GPUs: 4 GPUs used within the VC's quota, 4
    borrowed; a borrowing elastic job's GPUs are all borrowed."""
    on = [{"node": "a100-2", "gpus": [2 * w, 2 * w + 1]} for w in range(4)]
    make_job(world, status=JobStatus.RUNNING, workers=4, min_workers=2, max_workers=4,
             gpus_per_worker=2, placement=on)  # fmt: skip
    on = [{"node": "a100-3", "gpus": [w]} for w in range(3)]
    make_job(world, owner=world.outsider, vc=world.nlp, status=JobStatus.RUNNING, workers=3,
             min_workers=2, max_workers=4, borrowing=True, placement=on)  # fmt: skip

    got = scrape()

    gpus = "trainyard_gpus"
    assert got[(gpus, (("gpu_type", "A100"), ("state", "used"), ("vc", "vision")))] == 4
    assert got[(gpus, (("gpu_type", "A100"), ("state", "borrowed"), ("vc", "vision")))] == 4
    assert got[(gpus, (("gpu_type", "A100"), ("state", "borrowed"), ("vc", "nlp")))] == 3
    assert (gpus, (("gpu_type", "A100"), ("state", "used"), ("vc", "nlp"))) not in got
    assert got[(gpus, (("gpu_type", "A100"), ("state", "free"), ("vc", "")))] == 32 - 8 - 3


def test_requests_are_timed_per_view_with_their_database_time(world):
    client = Client()
    client.force_login(world.member)
    assert client.get("/api/v1/jobs/").status_code == 200

    got = scrape()

    view = (("view", "job-list"),)
    assert got[("trainyard_view_database_seconds_count", view)] >= 1
    assert got[("trainyard_view_database_seconds_sum", view)] > 0
    latency = "django_http_requests_latency_seconds_by_view_method_count"
    assert got[(latency, (("method", "GET"), ("view", "job-list")))] >= 1


def test_without_a_token_only_this_host_may_scrape(db, settings):
    settings.TRAINYARD_METRICS_TOKEN = ""
    refused = Client(REMOTE_ADDR="10.1.2.3").get("/metrics")
    assert refused.status_code == 403
    assert "TRAINYARD_METRICS_TOKEN" in refused.json()["detail"]
    proxied = Client().get("/metrics", HTTP_X_FORWARDED_FOR="10.1.2.3")
    assert proxied.status_code == 403  # a proxy on this host passes others' requests
    # From this host, but through no socket the kernel lists: whose it is is unknown.
    unknown = Client(REMOTE_ADDR="::1", REMOTE_PORT="1").get("/metrics")
    assert unknown.status_code == 403
    assert "could not be told" in unknown.json()["detail"]


def test_with_a_token_the_scraper_must_send_it(db, settings):
    settings.TRAINYARD_METRICS_TOKEN = "s3cret-scrape-token"
    assert Client().get("/metrics", HTTP_AUTHORIZATION="").status_code == 403  # even from here
    wrong = Client(REMOTE_ADDR="10.1.2.3").get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 403
    got = scrape(Client(REMOTE_ADDR="10.1.2.3"), HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")
    assert got[("trainyard_database_up", ())] == 1


def test_jobs_that_end_are_counted_by_how_and_vc(world):
    ended = (("status", "killed"), ("vc", "vision"))
    before = scrape().get(("trainyard_jobs_ended_total", ended), 0)
    job = make_job(world, status=JobStatus.QUEUED)
    kill_job(job, world.member)
    kill_job(make_job(world, status=JobStatus.QUEUED), world.member)

    got = scrape()

    assert got[("trainyard_jobs_ended_total", ended)] == before + 2
    queued = ("trainyard_jobs", (("gpu_type", "A100"), ("status", "queued"), ("vc", "vision")))
    assert queued not in got  # both gone from the gauge


def test_each_vcs_met_deadline_rate_is_a_gauge(world):
    now = timezone.now()
    deadline = now - timedelta(hours=1)
    for finished_at, status in [
        (deadline - timedelta(minutes=5), JobStatus.FINISHED),  # met
        (deadline - timedelta(minutes=5), JobStatus.FINISHED),  # met
        (deadline + timedelta(minutes=5), JobStatus.FINISHED),  # late
        (deadline - timedelta(minutes=5), JobStatus.FAILED),  # failed in time: missed
    ]:
        make_job(world, status=status, deadline=deadline, finished_at=finished_at)
    make_job(world, status=JobStatus.FINISHED, finished_at=now)  # no deadline: not counted
    old = now - timedelta(days=30)  # ended before the window: not counted
    make_job(world, status=JobStatus.FINISHED, deadline=old, finished_at=old)

    found = scrape()

    assert found["trainyard_vc_deadlines_met_ratio", (("vc", "vision"),)] == 0.5
    assert found["trainyard_vc_deadline_jobs", (("outcome", "met"), ("vc", "vision"))] == 2
    assert found["trainyard_vc_deadline_jobs", (("outcome", "missed"), ("vc", "vision"))] == 2
    assert ("trainyard_vc_deadlines_met_ratio", (("vc", "nlp"),)) not in found
    # The VC's deadline summary in the API says the same.
    answer = world.client(world.member).get("/api/v1/vcs/vision/deadlines/").json()
    assert (answer["met"], answer["ended"], answer["met_rate"]) == (2, 4, 0.5)
