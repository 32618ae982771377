"""The idle watch with real parts: node agents serving injected utilisation, the Debian
Prometheus scraping them, an SMTP server receiving the emails. The policy's minutes are
counted on the clock the test passes; utilisation is read for the real last window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.jobmanager.idle import watch_idle_jobs
from backend.jobs.models import JobAttempt, JobEvent, JobStatus, JobType
from tests.backend.jobs_support import make_job
from tests.backend.metrics_support import scrape, scrape_token  # noqa: F401 (fixtures)
from tests.backend.repair_support import (  # noqa: F401 - the fixtures
    eager_celery_fixture,
    start_agents,
    start_prometheus,
    stop_at_end_fixture,
)
from tests.polling import wait_until

pytest_plugins = ["tests.smtp"]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
ADMIN = "ops@example.com"


def running_on(world, gpus: list[int], **fields):
    job = make_job(
        world, status=JobStatus.RUNNING, gpus_per_worker=len(gpus), attempt=1,
        placement=[{"node": "a100-1", "gpus": gpus, "cpus": 8, "memory": 1024}], **fields,
    )  # fmt: skip
    JobAttempt.objects.create(
        job=job, number=1, nodes=["a100-1"], gpus=[{"node": "a100-1", "gpus": gpus}],
        started_at=timezone.now() - timedelta(hours=3),
    )  # fmt: skip
    return job


@pytest.fixture
def watched(world, settings, tmp_path, stop_at_end, smtp, eager_celery):
    """vision warns after 60 idle minutes and kills 30 later; its interactive jobs are not
    watched. GPUs 0-1 and 4 of a100-1 serve 0 %, 2-3 serve 80 %."""
    settings.TRAINYARD_IDLE_WATCH_INTERVAL = 30
    settings.TRAINYARD_REPAIR_ALERT_EMAILS = [ADMIN]
    world.vision.idle_warn_minutes, world.vision.idle_kill_minutes = 60, 30
    world.vision.interactive_idle_warn_minutes = None
    world.vision.save()
    (agent,) = start_agents(tmp_path, ["a100-1"], gpus=8)
    stop_at_end.append(agent)
    busy = {"DCGM_FI_DEV_GPU_UTIL": 80}
    agent.inject({"gpus": {"2": busy, "3": busy}})  # the others serve 0 %
    prometheus = start_prometheus(tmp_path / "prometheus", [agent.target])
    stop_at_end.append(prometheus)
    settings.TRAINYARD_PROMETHEUS_URL = prometheus.url
    query = 'DCGM_FI_DEV_GPU_UTIL{gpu="4"}'
    wait_until(lambda: prometheus.sees(f"count_over_time({query}[1m])", 2), 30, "two scrapes")
    return prometheus


def test_an_idle_job_is_warned_then_killed_a_busy_one_left_alone(world, watched, smtp):
    idle = running_on(world, [0, 1], name="forgotten")
    busy = running_on(world, [2, 3])
    notebook = running_on(world, [4], type=JobType.INTERACTIVE)
    start = timezone.now()

    first = watch_idle_jobs(start)
    assert first.busy == [busy.job_id] and first.warned == [] and first.killed == []
    assert not smtp.messages

    warned = watch_idle_jobs(start + timedelta(minutes=61))
    assert warned.warned == [idle.job_id]
    (email,) = smtp.wait_for(1)
    assert email["X-Rcpt-To"] == world.member.email
    assert f"Job {idle.job_id} ({idle.name}) leaves its GPUs idle" in email["Subject"]
    body = email.get_payload()
    assert "has used none of its 2 A100 GPUs for 1 h" in body
    assert "it will be killed at" in body
    idle.refresh_from_db()
    assert idle.status == JobStatus.RUNNING
    assert "will be killed at" in idle.insight_message

    not_yet = watch_idle_jobs(start + timedelta(minutes=80))
    assert not_yet.killed == [] and not_yet.warned == []

    killed = watch_idle_jobs(start + timedelta(minutes=92))
    assert killed.killed == [idle.job_id]
    idle.refresh_from_db()
    assert idle.status == JobStatus.KILLING  # the backend stops it; then it is killed
    assert idle.failure_rule == "idle"
    event = JobEvent.objects.filter(job=idle).latest("created_at")
    assert event.to_status == JobStatus.KILLING and event.reason.startswith("idle: its 2 A100")
    assert event.actor_name == "trainyard"
    messages = smtp.wait_for(2)
    assert "was killed: its GPUs were idle" in messages[1]["Subject"]

    for job in (busy, notebook):
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING and job.idle_warned_at is None
    assert len(smtp.to(world.member.email)) == 2  # none about the busy job or the notebook


def test_without_utilisation_data_nothing_is_killed_and_an_alert_is_raised(
    world, watched, smtp, settings
):
    idle = running_on(world, [0, 1])
    start = timezone.now()
    watch_idle_jobs(start)
    assert watch_idle_jobs(start + timedelta(minutes=61)).warned == [idle.job_id]
    smtp.wait_for(1)

    watched.stop()  # Prometheus down
    blind = watch_idle_jobs(start + timedelta(minutes=200))

    assert blind.killed == [] and blind.unmeasured == [idle.job_id]
    idle.refresh_from_db()
    assert idle.status == JobStatus.RUNNING
    alert = smtp.wait_for(2)[1]
    assert ADMIN in alert["X-Rcpt-To"].split(", ")
    assert "Idle watch blind: 1 running jobs unmeasured" in alert["Subject"]
    assert "No job is warned or killed" in alert.get_payload()
    scraped = scrape()
    assert scraped[("trainyard_idle_watch_unmeasured_jobs", ())] == 1
