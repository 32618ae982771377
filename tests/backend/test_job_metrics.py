"""A job's GPU utilisation, read from a real Prometheus scraping node agents, for exactly
the GPUs each attempt was given."""

from __future__ import annotations

import pytest

from backend.jobs.models import JobAttempt, JobStatus
from tests.backend.jobs_support import make_job
from tests.backend.repair_support import (  # noqa: F401 - the fixtures
    start_agents,
    start_prometheus,
    stop_at_end_fixture,
)
from tests.servers import free_port, wait_until

pytestmark = pytest.mark.django_db


def metrics_of(world, job, user=None) -> dict:
    response = world.client(user or world.member).get(f"/api/v1/jobs/{job.job_id}/metrics/")
    assert response.status_code == 200, response.content
    return response.json()


def running_on(world, node: str, gpus: list[int]):
    job = make_job(
        world, status=JobStatus.RUNNING, gpus_per_worker=len(gpus),
        placement=[{"node": node, "gpus": gpus, "cpus": 8, "memory": 1024}],
    )  # fmt: skip
    JobAttempt.objects.create(job=job, number=1, nodes=[node], gpus=[{"node": node, "gpus": gpus}])
    return job


@pytest.mark.integration
def test_a_running_job_shows_the_utilisation_of_its_own_gpus(
    world, settings, tmp_path, stop_at_end
):
    (agent,) = start_agents(tmp_path, ["a100-1"], gpus=8)
    stop_at_end.append(agent)
    util = {"DCGM_FI_DEV_GPU_UTIL": 87}
    agent.inject({"gpus": {"2": util, "3": util, "5": {"DCGM_FI_DEV_GPU_UTIL": 11}}})
    prometheus = start_prometheus(tmp_path / "prometheus", [agent.target])
    stop_at_end.append(prometheus)
    settings.TRAINYARD_PROMETHEUS_URL = prometheus.url
    job = running_on(world, "a100-1", [2, 3])
    query = 'DCGM_FI_DEV_GPU_UTIL{gpu="3"}'
    wait_until(lambda: prometheus.sees(f"count_over_time({query}[1m])", 2), 30, "two scrapes")

    answer = metrics_of(world, job)

    assert answer["available"] is True
    assert [(one["attempt"], one["node"], one["gpu"]) for one in answer["series"]] == [
        (1, "a100-1", 2),
        (1, "a100-1", 3),
    ]  # not GPU 5, which another job uses
    assert all(value == 87 for one in answer["series"] for _, value in one["points"])
    assert answer["mean"] == 87


def test_without_a_metrics_source_the_answer_says_so(world, settings):
    settings.TRAINYARD_PROMETHEUS_URL = ""
    job = running_on(world, "a100-1", [0])

    answer = metrics_of(world, job)

    assert (answer["available"], answer["series"]) == (False, [])
    assert "TRAINYARD_PROMETHEUS_URL" in answer["message"]


def test_prometheus_unreachable_is_reported_not_a_server_error(world, settings):
    settings.TRAINYARD_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    job = running_on(world, "a100-1", [0])

    answer = metrics_of(world, job)

    assert answer["available"] is False
    assert "cannot be read now" in answer["message"]


def test_another_tenants_job_metrics_are_not_found(world, settings):
    settings.TRAINYARD_PROMETHEUS_URL = ""
    job = running_on(world, "a100-1", [0])

    response = world.client(world.outsider).get(f"/api/v1/jobs/{job.job_id}/metrics/")

    assert response.status_code == 404
