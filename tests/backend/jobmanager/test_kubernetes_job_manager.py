"""The job manager with the Kubernetes backend, against the fake API server: a job
submitted through the API becomes pods on the nodes the scheduler chose, and ends when
its pods do; a node that turns bad takes its job back to the queue; a pod's log reaches
the log viewer, the download and the retry classifier; a pod that never starts ends its
attempt after the start timeout."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from backend.clusters.models import Node
from backend.jobs.models import Job, JobStatus
from jobmanager.backends.kubernetes import KubernetesBackend
from tests.backend.jobs_support import JobManager
from tests.polling import wait_until

if TYPE_CHECKING:
    from tests.k8s_fake import FakeKubernetes

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.k8s_fake"]

JOBS = "/api/v1/jobs/"
NAMESPACE = "trainyard-jobs"


@pytest.fixture
def fake(fake_kubernetes: FakeKubernetes, world) -> FakeKubernetes:
    """The world's nodes, as Kubernetes Nodes."""
    for node in world.nodes:
        fake_kubernetes.add_node(
            node.name,
            gpus=node.gpus,
            cpu=str(node.cpus),
            memory=f"{node.memory}Mi",
            labels={"trainyard.io/gpu-type": node.gpu_type.name},
        )
    return fake_kubernetes


@pytest.fixture
def backend(fake, fake_api_client, fake_clock, settings, tmp_path):
    # Imported once pytest has loaded the plugin, so that its asserts are rewritten.
    from tests.k8s_fake import fake_settings

    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    settings.TRAINYARD_BACKEND = "kubernetes"  # submissions are checked for this cluster
    backend = KubernetesBackend(
        fake_settings(NAMESPACE),
        api_client=fake_api_client,
        watch_nodes=False,
        log_dir=settings.TRAINYARD_LOG_DIR,
        clock=fake_clock,
    )
    yield backend
    backend.logs.stop()
    backend.node_watcher.stop()


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


def submit(world, **spec) -> Job:
    body = {
        "vc": "vision",
        "gpu_type": "A100",
        "command": "torchrun train.py",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "gpus_per_worker": 4,
        "workers": 2,
    } | spec
    response = world.client(world.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(job_id=response.json()["id"])


def pods_of(fake: FakeKubernetes, job: Job) -> list[dict]:
    return fake.list("pods", NAMESPACE, f"trainyard.io/job={job.job_id}")


def test_a_submitted_job_runs_as_pods_and_finishes_when_they_succeed(world, jobs, fake):
    job = submit(world)

    jobs.run()

    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    pods = pods_of(fake, job)
    assert [pod["metadata"]["name"] for pod in pods] == [
        f"ty-{job.job_id}-1-0",
        f"ty-{job.job_id}-1-1",
    ]
    placed = [worker["node"] for worker in job.placement]
    assert [pod["spec"]["nodeName"] for pod in pods] == placed
    for pod in pods:
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert pod["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/pytorch:24.08-py3"
    assert fake.get("services", f"ty-{job.job_id}-1", NAMESPACE) is not None
    assert fake.get("networkpolicies", f"ty-{job.job_id}", NAMESPACE) is not None

    for pod in pods:
        fake.set_pod_phase(NAMESPACE, pod["metadata"]["name"], "Running")
    jobs.run()
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING

    for pod in pods:
        fake.set_pod_phase(NAMESPACE, pod["metadata"]["name"], "Succeeded", exit_code=0)
    jobs.run()

    job.refresh_from_db()
    assert (job.status, job.exit_code) == (JobStatus.FINISHED, 0)
    assert pods_of(fake, job) == []  # removed once recorded
    assert fake.list("services", NAMESPACE) == []


def test_a_failed_pod_fails_the_attempt_with_its_exit_code(world, jobs, fake):
    job = submit(world, workers=1, max_retries=0)
    jobs.run()

    fake.set_pod_phase(NAMESPACE, f"ty-{job.job_id}-1-0", "Failed", exit_code=2)
    jobs.run()

    job.refresh_from_db()
    assert (job.status, job.exit_code) == (JobStatus.FAILED, 2)
    assert job.attempts.get().exit_code == 2
    assert pods_of(fake, job) == []


def test_a_killed_job_has_its_pods_deleted(world, jobs, fake):
    job = submit(world)
    jobs.run()

    response = world.client(world.member).post(f"{JOBS}{job.job_id}/kill/", {}, format="json")
    assert response.status_code == 200
    jobs.run()
    assert all(pod["metadata"].get("deletionTimestamp") for pod in pods_of(fake, job))
    for pod in pods_of(fake, job):
        fake.finish_deletion(NAMESPACE, pod["metadata"]["name"])
    jobs.run()

    job.refresh_from_db()
    assert job.status == JobStatus.KILLED
    assert fake.list("services", NAMESPACE) == []


def test_a_job_on_a_node_that_goes_not_ready_leaves_it_at_once(world, jobs, fake, backend):
    job = submit(world, max_retries=2)
    jobs.run()
    for pod in pods_of(fake, job):
        fake.set_pod_phase(NAMESPACE, pod["metadata"]["name"], "Running")
    node = Job.objects.get(pk=job.pk).placement[0]["node"]

    fake.set_node_ready(node, False)
    backend.node_watcher.watch_once(timeout_seconds=5)
    jobs.run()

    job.refresh_from_db()
    assert job.status in (JobStatus.QUEUED, JobStatus.RUNNING)
    attempt = job.attempts.get(number=1)
    assert attempt.ended_at is not None  # the first attempt is over, without a NCCL timeout
    first_attempt = f"ty-{job.job_id}-1-"
    assert not [p for p in pods_of(fake, job) if p["metadata"]["name"].startswith(first_attempt)]


def test_the_kubernetes_backend_is_built_from_settings_and_kubeconfig(
    fake_kubernetes, settings, tmp_path, monkeypatch
):
    from django.core.exceptions import ImproperlyConfigured

    from backend.clusters.kubernetes import kubernetes_backend

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{fake_kubernetes.url}'}}}}]\n"
        "users: [{name: fake, user: {token: test}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    settings.TRAINYARD_K8S_NAMESPACE = "jobs-here"
    settings.TRAINYARD_K8S_DATA_VOLUME = "nfs://nfs.example.com/datasets"
    settings.TRAINYARD_K8S_INIT_COMMAND = "/sbin/tini -s -g --"
    settings.TRAINYARD_K8S_START_TIMEOUT_SECONDS = 900
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    settings.TRAINYARD_K8S_PORTAL_NAMESPACE = "portal"
    settings.TRAINYARD_K8S_GATEWAY_LABELS = ["app=gw", "tier=edge"]
    settings.TRAINYARD_K8S_JOB_EGRESS = False

    backend = kubernetes_backend()
    try:
        assert backend.namespace == "jobs-here"
        assert backend.settings.start_timeout_seconds == 900
        assert backend.logs is not None  # pod logs go to TRAINYARD_LOG_DIR
        assert backend.settings.init_command == ("/sbin/tini", "-s", "-g", "--")
        assert backend.settings.data_volume.read_only
        assert backend.settings.portal_namespace == "portal"
        assert backend.settings.gateway_labels == (("app", "gw"), ("tier", "edge"))
        assert backend.settings.egress_open is False
        assert backend.api_client.configuration.host == fake_kubernetes.url
    finally:
        backend.close()

    settings.TRAINYARD_K8S_OUTPUT_VOLUME = "ftp://nowhere"
    with pytest.raises(ImproperlyConfigured, match="TRAINYARD_K8S_OUTPUT_VOLUME"):
        kubernetes_backend()
    settings.TRAINYARD_K8S_OUTPUT_VOLUME = ""
    for labels in ([], ["app"], ["=gw"]):  # no labels would admit the whole namespace
        settings.TRAINYARD_K8S_GATEWAY_LABELS = labels
        with pytest.raises(ImproperlyConfigured, match="TRAINYARD_K8S_GATEWAY_LABELS"):
            kubernetes_backend()


def tail(world, job: Job, worker: int = 0) -> dict:
    response = world.client(world.member).get(f"{JOBS}{job.job_id}/log/tail/?worker={worker}")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_pods_log_shows_in_tail_and_download_and_survives_the_pods_deletion(world, jobs, fake):
    job = submit(world, workers=1)
    jobs.run()
    name = f"ty-{job.job_id}-1-0"
    fake.set_pod_phase(NAMESPACE, name, "Running")
    fake.write_pod_log(NAMESPACE, name, "loading ImageNet shards\nepoch 1 top-1 0.31\n")
    jobs.run()

    wait_until(lambda: "epoch 1 top-1 0.31" in tail(world, job)["text"], 10, "the live log")
    fake.write_pod_log(NAMESPACE, name, "epoch 2 top-1 0.52\n")
    fake.set_pod_phase(NAMESPACE, name, "Succeeded", exit_code=0)
    jobs.run()

    job.refresh_from_db()
    assert job.status == JobStatus.FINISHED
    assert pods_of(fake, job) == []  # the pod is gone; its log is not
    answer = tail(world, job)
    assert "epoch 2 top-1 0.52" in answer["text"] and answer["complete"] is True
    download = world.client(world.member).get(f"{JOBS}{job.job_id}/log/")
    text = b"".join(download.streaming_content).decode()
    assert "loading ImageNet shards\nepoch 1 top-1 0.31\nepoch 2 top-1 0.52\n" in text
    assert text.endswith("=== attempt 1 ended: exit code 0 ===\n")


def test_an_oom_killed_container_is_a_user_error_and_is_not_retried(world, jobs, fake):
    job = submit(world, workers=2, max_retries=3)
    jobs.run()
    names = [pod["metadata"]["name"] for pod in pods_of(fake, job)]
    for name in names:
        fake.set_pod_phase(NAMESPACE, name, "Running")
    fake.write_pod_log(NAMESPACE, names[1], "building the sample index\n")

    fake.set_pod_phase(NAMESPACE, names[1], "Failed", exit_code=137, reason="OOMKilled")
    jobs.run()  # its peer is stopped
    for pod in pods_of(fake, job):
        if pod["metadata"].get("deletionTimestamp"):
            fake.finish_deletion(NAMESPACE, pod["metadata"]["name"])
    jobs.run()

    job.refresh_from_db()
    assert (job.status, job.exit_code) == (JobStatus.FAILED, 137)
    assert (job.failure_class, job.failure_rule) == ("user", "oom-killed")
    assert job.retries_used == 0
    attempt = job.attempts.get()
    assert "host memory" in attempt.message and "not retried" in attempt.message
    assert pods_of(fake, job) == []


def test_a_pod_stuck_pulling_its_image_ends_the_attempt_after_the_start_timeout(
    world, jobs, fake, backend
):
    job = submit(world, workers=1, gpus_per_worker=8, image="nvcr.io/nvidia/pytorhc:24.08-py3")
    jobs.run()
    name = f"ty-{job.job_id}-1-0"
    fake.set_pod_phase(
        NAMESPACE, name, "Pending", waiting_reason="ImagePullBackOff",
        message='Back-off pulling image "nvcr.io/nvidia/pytorhc:24.08-py3"',
    )  # fmt: skip
    jobs.run()
    assert Job.objects.get(pk=job.pk).status in (JobStatus.SCHEDULING, JobStatus.RUNNING)
    assert gpus_used(world) == 8

    # The start timeout counts from the pod's creation (which a loaded machine may put
    # seconds after the clock was made): move the clock to just past it.
    created = fake.get("pods", name, NAMESPACE)["metadata"]["creationTimestamp"]
    created_at = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    backend.clock.now = created_at.timestamp() + backend.settings.start_timeout_seconds + 1
    jobs.run()

    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert (job.failure_class, job.failure_rule) == ("user", "image-pull-failed")
    assert "pytorhc:24.08-py3" in job.attempts.get().message
    assert pods_of(fake, job) == [] and gpus_used(world) == 0  # the GPUs are free again
    assert "did not start: ImagePullBackOff" in tail(world, job)["text"]


def gpus_used(world) -> int:
    summary = world.client(world.member).get("/api/v1/cluster/summary/").json()
    return sum(row["gpus_used"] for row in summary["gpu_types"])


def test_an_elastic_job_grows_into_freed_gpus_as_a_new_round_of_pods_of_the_same_attempt(
    world, jobs, fake, settings
):
    # Deleted pods go at once (the grace and the wait for the kubelet are the backend's
    # own tests: tests/jobmanager/test_kubernetes_resize.py).
    settings.TRAINYARD_STOP_GRACE_SECONDS = 0
    settings.TRAINYARD_ELASTIC_MIN_INTERVAL_SECONDS = 0
    Node.objects.exclude(name="a100-1").update(schedulable=False)
    other = submit(world, workers=1, gpus_per_worker=4)
    jobs.run()
    elastic = submit(world, workers=2, min_workers=2, max_workers=4, gpus_per_worker=2)
    jobs.run()
    elastic.refresh_from_db()
    assert (elastic.status, elastic.workers) == (JobStatus.RUNNING, 2)
    assert [pod["metadata"]["name"] for pod in pods_of(fake, elastic)] == [
        f"ty-{elastic.job_id}-1-0",
        f"ty-{elastic.job_id}-1-1",
    ]
    for pod in pods_of(fake, elastic) + pods_of(fake, other):
        fake.set_pod_phase(NAMESPACE, pod["metadata"]["name"], "Running")

    fake.set_pod_phase(NAMESPACE, f"ty-{other.job_id}-1-0", "Succeeded", exit_code=0)
    jobs.run()

    elastic.refresh_from_db()
    assert (elastic.status, elastic.workers, elastic.resizes) == (JobStatus.RUNNING, 4, 1)
    assert elastic.events.last().reason == "resized from 2 to 4 workers: GPUs free"
    pods = pods_of(fake, elastic)
    assert [pod["metadata"]["name"] for pod in pods] == [
        f"ty-{elastic.job_id}-1-{rank}" for rank in range(4)
    ]
    placed = [worker["node"] for worker in elastic.placement]
    assert [pod["spec"]["nodeName"] for pod in pods] == placed
    for rank, pod in enumerate(pods):
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "4")
        assert pod["metadata"]["labels"]["trainyard.io/round"] == "1"
        assert "torchrun --nnodes=2:4" in pod["spec"]["containers"][0]["command"][-1]
    for pod in pods:
        fake.set_pod_phase(NAMESPACE, pod["metadata"]["name"], "Running")
    jobs.run()  # the new round's workers are the job's: it runs on, never restarted
    elastic.refresh_from_db()
    assert (elastic.status, elastic.workers) == (JobStatus.RUNNING, 4)
    assert list(elastic.attempts.values_list("number", flat=True)) == [1]
