"""Elastic jobs on the Kubernetes backend, against the fake API server (issue 34): each
worker runs under torchrun's elastic agent with the rendezvous on rank 0, and a resize
brings a running attempt to its new workers in a new rendezvous round, under the same
Service, without a new attempt. The fake runs no command: what it shows is what the
API server is asked for and what the backend reports meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import kubernetes_validate
import pytest

from jobmanager.backends import DeployError, JobLaunch, WorkerState
from jobmanager.backends.k8s_manifests import pod_manifest, service_name
from jobmanager.backends.kubernetes import KubernetesBackend
from tests.jobmanager.test_kubernetes_backend import (
    JOB,
    KUBERNETES_VERSION,
    a_launch,
    job_pods,
    job_services,
)
from tests.polling import wait_until

pytest_plugins = ["tests.k8s_fake"]

GRACE = 30
SECONDS = 20.0


def elastic(cluster, workers: int) -> JobLaunch:
    """A 2..4-worker elastic job at ``workers`` workers, each on the next of two nodes."""
    launch = a_launch(cluster, command="python train.py --resume", workers=workers)
    return replace(launch, min_workers=2, max_workers=4)


@pytest.fixture
def fake(k8s_cluster):
    return k8s_cluster.require_fake()


@pytest.fixture
def backend(k8s_cluster, fake) -> Iterator[KubernetesBackend]:
    backend = KubernetesBackend(
        k8s_cluster.settings, api_client=k8s_cluster.api_client, watch_nodes=False
    )
    yield backend
    backend.node_watcher.stop()


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def command_of(pod: dict) -> str:
    return pod["spec"]["containers"][0]["command"][-1]


def running(cluster, fake) -> None:
    """The kubelet has started every pod not being deleted."""
    for pod in job_pods(cluster):
        if not pod["metadata"].get("deletionTimestamp"):
            fake.set_pod_phase(cluster.namespace, pod["metadata"]["name"], "Running")


def resize_in_background(
    backend: KubernetesBackend, launch: JobLaunch
) -> tuple[threading.Thread, list[BaseException]]:
    """Resize in a thread (it waits for the kubelet, which the test plays); what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            backend.resize(launch, GRACE)
        except BaseException as error:  # handed to the test
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def kubelet_ends_the_deleted_pods(cluster, fake) -> list[str]:
    """Once the resize has deleted every pod (gracefully), the kubelet ends them; their
    names."""
    wait_until(
        lambda: all(pod["metadata"].get("deletionTimestamp") for pod in job_pods(cluster)),
        SECONDS,
        "the resize deletes every pod",
    )
    going = job_pods(cluster)
    for pod in going:
        assert pod["metadata"]["deletionGracePeriodSeconds"] == GRACE
        fake.finish_deletion(cluster.namespace, pod["metadata"]["name"])
    return [pod["metadata"]["name"] for pod in going]


def resize_and_play(cluster, fake, backend: KubernetesBackend, launch: JobLaunch) -> None:
    thread, raised = resize_in_background(backend, launch)
    kubelet_ends_the_deleted_pods(cluster, fake)
    thread.join(SECONDS)
    assert not thread.is_alive() and not raised, raised


# --- the elastic worker ------------------------------------------------------------------


def test_an_elastic_worker_runs_under_torchrun_with_the_rendezvous_on_rank_0(k8s_cluster, backend):
    launch = elastic(k8s_cluster, 2)

    backend.deploy(launch)

    service = service_name(JOB, 1)
    rank_0 = f"ty-{JOB}-1-0.{service}.{k8s_cluster.namespace}.svc.cluster.local"
    for rank, pod in enumerate(job_pods(k8s_cluster)):
        command = command_of(pod)
        own = f"ty-{JOB}-1-{rank}.{service}.{k8s_cluster.namespace}.svc.cluster.local"
        assert command.startswith("exec torchrun --nnodes=2:4 --nproc-per-node=1 ")
        assert f"--rdzv-backend=c10d --rdzv-endpoint={rank_0}:29400 --rdzv-id={JOB}-1-0 " in (
            command
        )
        assert f"--rdzv-conf=is_host={int(rank == 0)}," in command
        assert f"--local-addr={own} " in command
        assert command.endswith("--no-python /bin/sh -c 'python train.py --resume'")
        env = env_of(pod)
        assert (env["TRAINYARD_MIN_WORKERS"], env["TRAINYARD_MAX_WORKERS"]) == ("2", "4")
        assert env["TRAINYARD_RDZV_ENDPOINT"] == f"{rank_0}:29400"
        ports = pod["spec"]["containers"][0]["ports"]
        assert {"name": "rendezvous", "containerPort": 29400} in [
            {"name": p["name"], "containerPort": p["containerPort"]} for p in ports
        ]
        assert pod["metadata"]["labels"]["trainyard.io/round"] == "0"


def test_a_fixed_size_job_runs_its_command_as_given(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)

    backend.deploy(launch)

    assert [command_of(pod) for pod in job_pods(k8s_cluster)] == ["sleep 600"] * 2
    assert all("TRAINYARD_MIN_WORKERS" not in env_of(pod) for pod in job_pods(k8s_cluster))


# --- resizes -----------------------------------------------------------------------------


def test_a_resize_grows_the_attempt_into_a_new_round_under_the_same_service(
    k8s_cluster, fake, backend
):
    backend.deploy(elastic(k8s_cluster, 2))
    running(k8s_cluster, fake)
    [service_before] = job_services(k8s_cluster)
    fake.requests.clear()

    thread, raised = resize_in_background(backend, elastic(k8s_cluster, 4))
    replaced = kubelet_ends_the_deleted_pods(k8s_cluster, fake)
    thread.join(SECONDS)

    assert not thread.is_alive() and not raised, raised
    assert replaced == [f"ty-{JOB}-1-0", f"ty-{JOB}-1-1"]
    pods = job_pods(k8s_cluster)
    assert [pod["metadata"]["name"] for pod in pods] == [f"ty-{JOB}-1-{rank}" for rank in range(4)]
    rank_0 = f"ty-{JOB}-1-0.{service_name(JOB, 1)}.{k8s_cluster.namespace}.svc.cluster.local"
    for rank, pod in enumerate(pods):
        labels, env = pod["metadata"]["labels"], env_of(pod)
        assert (labels["trainyard.io/attempt"], labels["trainyard.io/round"]) == ("1", "1")
        assert pod["spec"]["nodeName"] == k8s_cluster.nodes[rank % 2]
        assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == (str(rank), "4", rank_0)
        assert f"--rdzv-id={JOB}-1-1 " in command_of(pod)  # a new round, at the same place
        assert f"--rdzv-endpoint={rank_0}:29400 " in command_of(pod)
        # The deleted pods were gone first: the device plugin gave every new pod its GPUs.
        assert len(fake.pod_devices(k8s_cluster.namespace, pod["metadata"]["name"])) == 4
    # The same attempt, under the same Service: no new attempt, nothing restarted from
    # scratch (the workers resume from the job's checkpoint in the output volume).
    [service_after] = job_services(k8s_cluster)
    assert service_after["metadata"]["uid"] == service_before["metadata"]["uid"]
    assert service_after["metadata"]["annotations"]["trainyard.io/workers"] == "4"
    for request in fake.requests_for("POST"):  # what the API server received
        assert request.body["kind"] == "Pod"
        kubernetes_validate.validate(request.body, KUBERNETES_VERSION, strict=True)

    running(k8s_cluster, fake)
    report = backend.reports()[JOB]
    assert report.attempt == 1
    assert [(w.rank, w.state) for w in report.workers] == [
        (rank, WorkerState.RUNNING) for rank in range(4)
    ]


def test_while_a_resize_waits_for_the_kubelet_its_workers_are_pending_not_failed(
    k8s_cluster, fake, backend
):
    backend.deploy(elastic(k8s_cluster, 2))
    running(k8s_cluster, fake)

    thread, raised = resize_in_background(backend, elastic(k8s_cluster, 4))
    wait_until(
        lambda: all(p["metadata"].get("deletionTimestamp") for p in job_pods(k8s_cluster)),
        SECONDS,
        "the resize deletes every pod",
    )
    # The old pods end (SIGTERM'd), one of them with an error: none of it is the job's.
    fake.set_pod_phase(k8s_cluster.namespace, f"ty-{JOB}-1-1", "Failed", 143)
    report = backend.reports()[JOB]
    assert [(w.state, w.reason) for w in report.workers] == [(WorkerState.PENDING, "Resizing")] * 4
    # No new pod while the old ones hold their GPUs.
    assert all(p["metadata"]["labels"]["trainyard.io/round"] == "0" for p in job_pods(k8s_cluster))

    for pod in job_pods(k8s_cluster):
        fake.finish_deletion(k8s_cluster.namespace, pod["metadata"]["name"])
    thread.join(SECONDS)
    assert not thread.is_alive() and not raised, raised
    assert [(w.state, w.reason) for w in backend.reports()[JOB].workers] == [
        (WorkerState.PENDING, "Pending")
    ] * 4


def test_a_resize_shrinks_the_attempt_and_its_dropped_ranks_are_gone(k8s_cluster, fake, backend):
    backend.deploy(elastic(k8s_cluster, 2))
    running(k8s_cluster, fake)
    resize_and_play(k8s_cluster, fake, backend, elastic(k8s_cluster, 4))
    running(k8s_cluster, fake)

    resize_and_play(k8s_cluster, fake, backend, elastic(k8s_cluster, 2))

    pods = job_pods(k8s_cluster)
    assert [pod["metadata"]["name"] for pod in pods] == [f"ty-{JOB}-1-0", f"ty-{JOB}-1-1"]
    for rank, pod in enumerate(pods):
        assert pod["metadata"]["labels"]["trainyard.io/round"] == "2"
        assert (env_of(pod)["RANK"], env_of(pod)["WORLD_SIZE"]) == (str(rank), "2")
        assert f"--rdzv-id={JOB}-1-2 " in command_of(pod)
    running(k8s_cluster, fake)
    report = backend.reports()[JOB]
    assert (report.attempt, [w.state for w in report.workers]) == (1, [WorkerState.RUNNING] * 2)


def test_resizing_to_the_workers_it_runs_changes_nothing(k8s_cluster, fake, backend):
    backend.deploy(elastic(k8s_cluster, 2))
    fake.requests.clear()

    backend.resize(elastic(k8s_cluster, 2), GRACE)

    assert fake.requests_for("DELETE") == [] and fake.requests_for("POST") == []
    assert fake.requests_for("PATCH") == []


def test_a_job_not_deployed_or_being_stopped_is_not_elastic(k8s_cluster, fake, backend):
    backend.resize(elastic(k8s_cluster, 4), GRACE)  # never deployed
    assert job_pods(k8s_cluster) == []

    backend.deploy(elastic(k8s_cluster, 2))
    running(k8s_cluster, fake)
    backend.stop(JOB, GRACE)
    backend.resize(elastic(k8s_cluster, 4), GRACE)

    assert len(job_pods(k8s_cluster)) == 2
    assert all(p["metadata"]["labels"]["trainyard.io/round"] == "0" for p in job_pods(k8s_cluster))


def test_a_pod_the_resize_could_not_create_fails_its_worker_at_once(k8s_cluster, fake, backend):
    backend.deploy(elastic(k8s_cluster, 2))
    running(k8s_cluster, fake)
    fake.fail_create("pods", nth=3, code=500)  # rank 2 of the new round

    thread, raised = resize_in_background(backend, elastic(k8s_cluster, 4))
    kubelet_ends_the_deleted_pods(k8s_cluster, fake)
    thread.join(SECONDS)

    assert not thread.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], DeployError), raised
    report = backend.reports()[JOB]
    assert [(w.rank, w.state, w.reason) for w in report.workers][2:] == [
        (2, WorkerState.FAILED, "PodMissing"),
        (3, WorkerState.FAILED, "PodMissing"),
    ]


def test_a_resize_whose_process_was_lost_fails_its_missing_workers_after_the_start_timeout(
    k8s_cluster, fake, fake_clock
):
    clock = fake_clock
    backend = KubernetesBackend(
        k8s_cluster.settings, api_client=k8s_cluster.api_client, watch_nodes=False, clock=clock
    )
    try:
        backend.deploy(elastic(k8s_cluster, 2))
        # What a resize had done when its process died: the round recorded, the old pods
        # deleted, no new pod made.
        name = service_name(JOB, 1)
        k8s_cluster.core.patch_namespaced_service(
            name,
            k8s_cluster.namespace,
            {
                "metadata": {
                    "annotations": {
                        "trainyard.io/round": "1",
                        "trainyard.io/workers": "4",
                        "trainyard.io/resized-at": str(clock.now),
                    }
                }
            },
        )
        for pod in job_pods(k8s_cluster):
            k8s_cluster.core.delete_namespaced_pod(
                pod["metadata"]["name"], k8s_cluster.namespace, grace_period_seconds=0
            )

        assert [w.reason for w in backend.reports()[JOB].workers] == ["Resizing"] * 4
        clock.now += k8s_cluster.settings.start_timeout_seconds
        report = backend.reports()[JOB]
        assert [w.state for w in report.workers] == [WorkerState.FAILED] * 4
        assert report.workers[0].reason.startswith("Resizing: its pod not created after 600 s")
    finally:
        backend.node_watcher.stop()


def test_every_manifest_of_an_elastic_round_passes_the_official_schema(k8s_cluster):
    launch = elastic(k8s_cluster, 4)
    for worker in launch.workers:
        manifest = pod_manifest(launch, worker, k8s_cluster.settings, round_number=3)
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
