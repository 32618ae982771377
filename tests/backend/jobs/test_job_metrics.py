"""A job's GPU utilisation, read from a real Prometheus scraping node agents, for exactly
the GPUs each attempt was given: on Kubernetes, those the device plugin gave its pods."""

from __future__ import annotations

import pytest

from backend.jobmanager.deployment import launch_for
from backend.jobs.models import JobAttempt, JobStatus
from jobmanager.backends.kubernetes import KubernetesBackend
from tests.backend.jobs_support import make_job
from tests.backend.repair_support import (  # noqa: F401 - the fixtures
    start_agents,
    start_prometheus,
    stop_at_end_fixture,
)
from tests.jobmanager.test_kubernetes_backend import MIA
from tests.polling import wait_until
from tests.servers import free_port

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fake"]
NAMESPACE = "trainyard-jobs"


def metrics_of(world, job, user=None) -> dict:
    response = world.client(user or world.member).get(f"/api/v1/jobs/{job.job_id}/metrics/")
    assert response.status_code == 200, response.content
    return response.json()


def running_on(world, node: str, gpus: list[int]):
    job = make_job(
        world, status=JobStatus.RUNNING, gpus_per_worker=len(gpus), attempt=1,
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


@pytest.mark.integration
def test_on_kubernetes_the_chart_shows_the_gpus_the_device_plugin_gave_the_pods(
    world, settings, tmp_path, stop_at_end, fake_kubernetes, fake_api_client
):
    from tests.k8s_fake import fake_settings  # once pytest has loaded the plugin

    settings.TRAINYARD_BACKEND = "kubernetes"
    settings.TRAINYARD_K8S_NAMESPACE = NAMESPACE
    fake_kubernetes.add_node("a100-1", gpus=8, labels={"trainyard.io/gpu-type": "A100"})
    backend = KubernetesBackend(fake_settings(NAMESPACE), fake_api_client, watch_nodes=False)
    mine = running_on(world, "a100-1", [0, 1, 2, 3])  # the scheduler's indices
    other = running_on(world, "a100-1", [4, 5, 6, 7])
    for job in (other, mine):  # their deploy tasks ran in this order
        backend.deploy(launch_for(job, MIA))
    got = {
        job: fake_kubernetes.pod_devices(NAMESPACE, f"ty-{job.job_id}-1-0") for job in (mine, other)
    }
    assert got == {mine: [4, 5, 6, 7], other: [0, 1, 2, 3]}  # the device plugin's choice
    (agent,) = start_agents(tmp_path, ["a100-1"], gpus=8)
    stop_at_end.append(agent)
    agent.inject(
        {
            "gpus": {
                str(gpu): {"DCGM_FI_DEV_GPU_UTIL": 93 if job is mine else 7}
                for job, gpus in got.items()
                for gpu in gpus
            },
            "pods": {
                str(gpu): {
                    "pod": f"ty-{job.job_id}-1-0",
                    "namespace": NAMESPACE,
                    "container": "worker",
                }
                for job, gpus in got.items()
                for gpu in gpus
            },
        }
    )  # what dcgm-exporter serves, having asked the kubelet which pod holds each GPU
    prometheus = start_prometheus(tmp_path / "prometheus", [agent.target])
    stop_at_end.append(prometheus)
    settings.TRAINYARD_PROMETHEUS_URL = prometheus.url
    query = f'DCGM_FI_DEV_GPU_UTIL{{pod="ty-{mine.job_id}-1-0"}}'
    wait_until(lambda: prometheus.sees(f"count_over_time({query}[1m])", 2), 30, "two scrapes")

    answer = metrics_of(world, mine)

    assert [(one["node"], one["gpu"]) for one in answer["series"]] == [
        ("a100-1", gpu) for gpu in (4, 5, 6, 7)
    ]
    assert answer["mean"] == 93  # its own GPUs, not the ones the scheduler had recorded


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
