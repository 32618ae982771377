"""The Kubernetes backend against an API server: the in-process fake, or the real cluster
that KUBECONFIG names (then the tests that inject failures are skipped)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
import urllib3
import yaml
from kubernetes import client

from jobmanager.backends import (
    DeployError,
    JobLaunch,
    LaunchRefused,
    RunAs,
    WorkerSpec,
    WorkerState,
)
from jobmanager.backends.base import NODE_UNHEALTHY
from jobmanager.backends.k8s_manifests import (
    KubernetesSettings,
    VolumeSettings,
    job_manifests,
    job_policy_name,
    label_value,
    pod_manifest,
    service_name,
)
from jobmanager.backends.kubernetes import KubernetesBackend
from tests.polling import wait_until

pytest_plugins = ["tests.k8s_fake"]

JOB = "k3m9x2q7ab"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
KUBERNETES_VERSION = kubernetes_validate.latest_version()  # as tests/test_deploy_manifests.py
MIA = RunAs(30001, 30001, (30001, 30100), "ty-mia", "/home/ty-mia")


def a_launch(
    cluster,
    job_id: str = JOB,
    attempt: int = 1,
    vc: str = "vision",
    owner: str = "mia",
    command: str = "sleep 600",
    workers: int = 2,
    run_as: RunAs | None = MIA,
) -> JobLaunch:
    gpus = tuple(range(cluster.gpus_per_worker))
    return JobLaunch(
        job_id=job_id,
        attempt=attempt,
        name="bert-large",
        owner=owner,
        vc=vc,
        command=command,
        workers=tuple(
            WorkerSpec(rank, cluster.nodes[rank % len(cluster.nodes)], gpus, 250, 256)
            for rank in range(workers)
        ),
        env={"NCCL_DEBUG": "WARN"},
        data_path="/data/wiki",
        output_path="/output/bert-large",
        run_as=run_as,
    )


def pod_names(launch: JobLaunch) -> list[str]:
    return [f"ty-{launch.job_id}-{launch.attempt}-{w.rank}" for w in launch.workers]


@pytest.fixture
def backend(k8s_cluster, tmp_path):
    backend = KubernetesBackend(
        k8s_cluster.settings,
        api_client=k8s_cluster.api_client,
        watch_nodes=False,
        log_dir=tmp_path / "logs",
    )
    yield backend
    backend.logs.stop()
    backend.node_watcher.stop()


def as_dict(cluster, obj) -> dict:
    return cluster.api_client.sanitize_for_serialization(obj)


def job_pods(cluster, job_id: str = JOB) -> list[dict]:
    pods = cluster.core.list_namespaced_pod(
        cluster.namespace, label_selector=f"trainyard.io/job={job_id}"
    ).items
    return sorted((as_dict(cluster, pod) for pod in pods), key=lambda p: p["metadata"]["name"])


def job_services(cluster, job_id: str = JOB) -> list[dict]:
    services = cluster.core.list_namespaced_service(
        cluster.namespace, label_selector=f"trainyard.io/job={job_id}"
    ).items
    return [as_dict(cluster, service) for service in services]


def read_policy(cluster, job_id: str = JOB) -> dict:
    networking = client.NetworkingV1Api(cluster.api_client)
    return as_dict(
        cluster,
        networking.read_namespaced_network_policy(job_policy_name(job_id), cluster.namespace),
    )


def states(backend, job_id: str = JOB) -> list[tuple[str, int | None]]:
    return [(w.state, w.exit_code) for w in backend.reports()[job_id].workers]


# --- deployment ---------------------------------------------------------------------------


def test_deploy_makes_a_pod_per_worker_on_its_node_a_headless_service_and_the_job_policy(
    k8s_cluster, backend
):
    launch = a_launch(k8s_cluster)

    backend.deploy(launch)

    pods = job_pods(k8s_cluster)
    assert [p["metadata"]["name"] for p in pods] == pod_names(launch)
    service = service_name(JOB, 1)
    for rank, pod in enumerate(pods):
        spec, labels = pod["spec"], pod["metadata"]["labels"]
        assert spec["nodeName"] == launch.workers[rank].node
        assert spec.get("schedulerName", "default-scheduler") == "default-scheduler"
        assert (spec["restartPolicy"], spec["hostname"], spec["subdomain"]) == (
            "Never",
            pod["metadata"]["name"],
            service,
        )
        assert labels["trainyard.io/job"] == JOB and labels["trainyard.io/attempt"] == "1"
        assert (labels["trainyard.io/vc"], labels["trainyard.io/user"]) == ("vision", "mia")
        assert labels["trainyard.io/rank"] == str(rank)
        container = spec["containers"][0]
        init = list(k8s_cluster.settings.init_command)
        assert container["command"] == [*init, "/bin/sh", "-c", "sleep 600"]
        resources = container["resources"]
        assert resources["requests"] == resources["limits"]
        assert resources["requests"]["cpu"] == "250m"
        assert resources["requests"]["memory"] == "256Mi"
        gpus = resources["requests"].get("nvidia.com/gpu")
        assert gpus == (str(k8s_cluster.gpus_per_worker) if k8s_cluster.gpus_per_worker else None)
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["WORLD_SIZE"] == "2" and env["RANK"] == str(rank) and env["LOCAL_RANK"] == "0"
        assert env["MASTER_ADDR"] == (
            f"ty-{JOB}-1-0.{service}.{k8s_cluster.namespace}.svc.cluster.local"
        )
        assert env["MASTER_PORT"] == "29500" and env["TRAINYARD_JOB_ID"] == JOB
        assert env["TRAINYARD_DATA_PATH"] == "/data/wiki"
        assert env["TRAINYARD_OUTPUT_PATH"] == "/output/bert-large"
        assert env["NCCL_DEBUG"] == "WARN"
        assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin assigns the GPUs
    [headless] = job_services(k8s_cluster)
    assert headless["metadata"]["name"] == service
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert headless["spec"]["selector"] == {"trainyard.io/job": JOB, "trainyard.io/attempt": "1"}
    policy = read_policy(k8s_cluster)
    assert policy["spec"]["podSelector"] == {"matchLabels": {"trainyard.io/job": JOB}}


def test_pods_run_as_their_owner_never_root_with_no_way_to_gain_privileges(k8s_cluster, backend):
    backend.deploy(a_launch(k8s_cluster))

    for pod in job_pods(k8s_cluster):  # as the API server stored them
        assert pod["spec"]["securityContext"] == {
            "runAsUser": 30001, "runAsGroup": 30001, "runAsNonRoot": True, "fsGroup": 30001,
            "fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": [30100],
            "seccompProfile": {"type": "RuntimeDefault"},
        }  # fmt: skip
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"] == {
            "runAsNonRoot": True, "allowPrivilegeEscalation": False, "privileged": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        }  # fmt: skip
        assert pod["spec"]["automountServiceAccountToken"] is False
    assert backend.isolation(a_launch(k8s_cluster)).run_as.startswith(
        "ty-mia (uid 30001, gid 30001), set by the pod's securityContext"
    )


def test_a_launch_without_its_owner_s_account_is_refused_and_creates_nothing(k8s_cluster, backend):
    with pytest.raises(LaunchRefused, match="its owner mia has no Unix account"):
        backend.deploy(a_launch(k8s_cluster, run_as=None))

    assert job_pods(k8s_cluster) == [] and job_services(k8s_cluster) == []


def test_volumes_are_mounted_at_the_owner_s_and_the_vc_s_sub_paths():
    launch = a_launch(_Placed(gpus_per_worker=1))
    settings = KubernetesSettings(
        data_volume=VolumeSettings.parse("nfs://nfs/export", "/data", True, "{vc}/shared"),
        output_volume=VolumeSettings.parse("nfs://nfs/export", "/output", False, "{vc}/{user}"),
    )

    pod = pod_manifest(launch, launch.workers[0], settings)

    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert (mounts["data"]["subPath"], mounts["data"]["readOnly"]) == ("vision/shared", True)
    assert (mounts["output"]["subPath"], mounts["output"]["readOnly"]) == ("vision/ty-mia", False)
    escaping = replace(launch, run_as=replace(MIA, name=".."))
    with pytest.raises(ValueError, match="is not confined"):
        pod_manifest(escaping, launch.workers[0], settings)
    with pytest.raises(ValueError, match=r"without '\.\.'"):
        VolumeSettings.parse("pvc://x", "/out", sub_path="../{user}")


def test_every_manifest_passes_the_official_schema(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)
    for manifest in job_manifests(launch, k8s_cluster.settings):
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    if k8s_cluster.fake is not None:  # and what the API server received (it validates too)
        backend.deploy(launch)
        created = k8s_cluster.fake.requests_for("POST")
        assert {request.body["kind"] for request in created} == {
            "Pod",
            "Service",
            "NetworkPolicy",
        }
        for request in created:
            kubernetes_validate.validate(request.body, KUBERNETES_VERSION, strict=True)


def test_mounts_and_pull_secrets_follow_the_settings():
    launch = a_launch(_Placed(gpus_per_worker=1))
    for data in ("nfs://nfs.example.com/export/data", "hostpath:///mnt/data", "pvc://datasets"):
        settings = KubernetesSettings(
            image_pull_secrets=("registry-credentials",),
            default_image="registry.example.com/base:1",
            data_volume=VolumeSettings.parse(data, "/data", read_only=True),
            output_volume=VolumeSettings.parse("pvc://outputs", "/output"),
        )
        pod = pod_manifest(launch, launch.workers[0], settings)
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert (mounts["data"]["mountPath"], mounts["data"]["readOnly"]) == ("/data", True)
        assert volumes["output"]["persistentVolumeClaim"] == {"claimName": "outputs"}
        assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]
        assert pod["spec"]["containers"][0]["image"] == "registry.example.com/base:1"
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "datasets"}
    with pytest.raises(ValueError):
        VolumeSettings.parse("s3://bucket", "/data")


class _Placed:
    """Two nodes, as a cluster would give them, for manifest-only tests."""

    nodes = ("gpu-node-1", "gpu-node-2")

    def __init__(self, gpus_per_worker: int) -> None:
        self.gpus_per_worker = gpus_per_worker


def test_a_cpu_only_worker_requests_no_gpus():
    launch = a_launch(_Placed(gpus_per_worker=0))
    pod = pod_manifest(launch, launch.workers[0], KubernetesSettings())
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "250m", "memory": "256Mi"}


def test_names_and_labels_are_valid_whatever_the_vc_and_user_are_called():
    launch = a_launch(_Placed(1), vc="Vision_Team", owner="mia.o'neil+ml@example.com")
    manifests = job_manifests(launch, KubernetesSettings())
    for manifest in manifests:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        assert DNS_LABEL.match(manifest["metadata"]["name"])
        for value in manifest["metadata"]["labels"].values():
            assert LABEL_VALUE.match(value) and len(value) <= 63
    pod = manifests[-1]
    assert pod["metadata"]["annotations"]["trainyard.io/owner"] == "mia.o'neil+ml@example.com"
    # Cleaning a name must not make two tenants one: a hash of the original tells them apart.
    assert label_value("vision_a") != label_value("vision-a") == "vision-a"
    assert job_policy_name("Job_1") != job_policy_name("job-1")
    assert LABEL_VALUE.match(label_value("x" * 100)) and len(label_value("x" * 100)) == 63


def test_deploying_the_same_attempt_twice_changes_nothing(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)
    backend.deploy(launch)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in job_pods(k8s_cluster)}
    creates = len(k8s_cluster.fake.requests_for("POST")) if k8s_cluster.fake else 0

    backend.deploy(launch)

    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in job_pods(k8s_cluster)} == before
    if k8s_cluster.fake is not None:
        assert len(k8s_cluster.fake.requests_for("POST")) == creates


@pytest.mark.parametrize(
    ("kind", "nth"), [("pods", 2), ("pods", 1), ("services", 1)], ids=["2nd-pod", "1st-pod", "svc"]
)
def test_a_create_failing_half_way_leaves_nothing_behind(k8s_cluster, backend, kind, nth):
    fake = k8s_cluster.require_fake()
    fake.fail_create(kind, nth=nth, code=500)

    with pytest.raises(DeployError, match="500"):
        backend.deploy(a_launch(k8s_cluster))

    assert fake.list("pods") == [] and fake.list("services") == []
    assert fake.list("networkpolicies") == []
    assert backend.reports() == {}
    backend.deploy(a_launch(k8s_cluster))  # and the job can be deployed again
    assert len(fake.list("pods")) == 2


def test_an_unreachable_api_server_is_a_deploy_error(k8s_cluster):
    fake = k8s_cluster.require_fake()
    unreachable = fake.api_client()
    fake.stop()
    unreachable.configuration.retries = 0
    backend = KubernetesBackend(k8s_cluster.settings, api_client=unreachable, watch_nodes=False)
    with pytest.raises(DeployError):
        backend.deploy(a_launch(k8s_cluster))


def test_a_new_attempt_force_deletes_the_previous_one(k8s_cluster, backend):
    backend.deploy(a_launch(k8s_cluster, attempt=1))

    backend.deploy(a_launch(k8s_cluster, attempt=2))

    assert [p["metadata"]["name"] for p in job_pods(k8s_cluster)] == [
        f"ty-{JOB}-2-0",
        f"ty-{JOB}-2-1",
    ]
    assert [s["metadata"]["name"] for s in job_services(k8s_cluster)] == [service_name(JOB, 2)]
    assert backend.reports()[JOB].attempt == 2
    if k8s_cluster.fake is not None:
        deletes = k8s_cluster.fake.requests_for("DELETE", "pods")
        assert [d.query.get("gracePeriodSeconds") for d in deletes] == ["0", "0"]


# --- reports ------------------------------------------------------------------------------


def test_pod_phases_drive_the_reports(k8s_cluster, backend):
    jobs = {"runs000001": "sleep 600", "exits00000": "exit 0", "fails00000": "exit 3"}
    for job_id, command in jobs.items():
        backend.deploy(a_launch(k8s_cluster, job_id=job_id, command=command, workers=1))
    assert backend.reports()["runs000001"].workers[0].state in ("pending", "running")

    k8s_cluster.settle("ty-runs000001-1-0", "Running")
    k8s_cluster.settle("ty-exits00000-1-0", "Succeeded", 0)
    k8s_cluster.settle("ty-fails00000-1-0", "Failed", 3)

    reports = backend.reports()
    assert states(backend, "runs000001") == [(WorkerState.RUNNING, None)]
    assert states(backend, "exits00000") == [(WorkerState.SUCCEEDED, 0)]
    assert reports["exits00000"].succeeded
    assert states(backend, "fails00000") == [(WorkerState.FAILED, 3)]
    assert reports["fails00000"].ended and reports["fails00000"].failed_worker.rank == 0


def test_a_job_being_deployed_shows_its_missing_workers_pending(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)
    for manifest in job_manifests(launch, k8s_cluster.settings)[1:-1]:  # service and rank 0
        create = {"Service": k8s_cluster.core.create_namespaced_service}.get(
            manifest["kind"], k8s_cluster.core.create_namespaced_pod
        )
        create(k8s_cluster.namespace, manifest)

    workers = backend.reports()[JOB].workers

    assert [(w.state, w.reason) for w in workers][1] == (WorkerState.PENDING, "Deploying")


def test_a_deployed_job_that_lost_a_pod_reports_that_worker_failed(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)
    backend.deploy(launch)

    k8s_cluster.core.delete_namespaced_pod(
        pod_names(launch)[1], k8s_cluster.namespace, grace_period_seconds=0
    )

    wait_until(lambda: len(job_pods(k8s_cluster)) == 1, 10, "len(job_pods(k8s_cluster)) == 1")
    worker = backend.reports()[JOB].workers[1]
    assert (worker.state, worker.reason) == (WorkerState.FAILED, "PodMissing")


def test_a_job_whose_pods_all_vanished_is_absent(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)
    backend.deploy(launch)

    for name in pod_names(launch):
        k8s_cluster.core.delete_namespaced_pod(name, k8s_cluster.namespace, grace_period_seconds=0)

    wait_until(lambda: not job_pods(k8s_cluster), 10, "not job_pods(k8s_cluster)")
    assert JOB not in backend.reports()


def test_a_pod_that_can_never_pull_its_image_fails(k8s_cluster, backend):
    fake = k8s_cluster.require_fake()
    backend.deploy(a_launch(k8s_cluster, workers=1))
    pod = f"ty-{JOB}-1-0"

    fake.set_pod_phase(k8s_cluster.namespace, pod, "Pending", waiting_reason="ImagePullBackOff")
    assert backend.reports()[JOB].workers[0].state == WorkerState.PENDING  # may still come
    fake.set_pod_phase(k8s_cluster.namespace, pod, "Pending", waiting_reason="InvalidImageName")
    worker = backend.reports()[JOB].workers[0]
    assert (worker.state, worker.reason) == (WorkerState.FAILED, "InvalidImageName")


# --- stop and remove ----------------------------------------------------------------------


def test_stop_deletes_the_pods_with_the_grace_period(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)
    backend.deploy(launch)
    for name in pod_names(launch):
        k8s_cluster.settle(name, "Running")

    backend.stop(JOB, 7)

    for pod in job_pods(k8s_cluster):  # going (on a real cluster: maybe gone already)
        assert pod["metadata"]["deletionTimestamp"] is not None
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 7
    fake = k8s_cluster.fake
    if fake is not None:
        deletes = fake.requests_for("DELETE", "pods")
        assert [d.query["gracePeriodSeconds"] for d in deletes] == ["7", "7"]
        assert not backend.reports()[JOB].ended  # until the kubelet has killed them
        backend.stop(JOB, 7)  # asking again sends nothing new
        assert len(fake.requests_for("DELETE", "pods")) == 2
        for name in pod_names(launch):
            fake.finish_deletion(k8s_cluster.namespace, name)
    wait_until(lambda: JOB not in backend.reports(), 60, "JOB not in backend.reports()")


def test_stop_keeps_an_ended_pod_for_its_exit_code(k8s_cluster, backend):
    fake = k8s_cluster.require_fake()
    launch = a_launch(k8s_cluster)
    backend.deploy(launch)
    running, failed = pod_names(launch)
    fake.set_pod_phase(k8s_cluster.namespace, running, "Running")
    fake.set_pod_phase(k8s_cluster.namespace, failed, "Failed", exit_code=2)

    backend.stop(JOB, 30)
    fake.finish_deletion(k8s_cluster.namespace, running)

    report = backend.reports()[JOB]
    assert report.ended
    assert [(w.state, w.exit_code) for w in report.workers][1] == (WorkerState.FAILED, 2)


def test_remove_force_deletes_a_pod_stuck_terminating_and_the_service(k8s_cluster, backend):
    launch = a_launch(k8s_cluster)
    backend.deploy(launch)
    for name in pod_names(launch):
        k8s_cluster.settle(name, "Running")
    backend.stop(JOB, 300)  # its kubelet never confirms: stuck in Terminating

    backend.remove(JOB)

    wait_until(
        lambda: not job_pods(k8s_cluster) and not job_services(k8s_cluster),
        10,
        "not job_pods(k8s_cluster) and not job_services(k8s_cluster)",
    )
    assert JOB not in backend.reports()
    if k8s_cluster.fake is not None:
        deletes = k8s_cluster.fake.requests_for("DELETE", "pods")[-2:]
        assert [d.query["gracePeriodSeconds"] for d in deletes] == ["0", "0"]
    backend.remove(JOB)  # idempotent: what is gone is not found, and that is fine
    backend.stop(JOB, 30)
    backend.remove("nosuchjob")


# --- nodes --------------------------------------------------------------------------------


def test_a_node_going_not_ready_fails_its_job_at_once(k8s_cluster, backend):
    fake = k8s_cluster.require_fake()
    on_bad = a_launch(k8s_cluster, job_id="onbadnode1", workers=1)  # on gpu-node-1
    elsewhere = replace(
        on_bad,
        job_id="elsewhere1",
        workers=(replace(on_bad.workers[0], node="gpu-node-2"),),
    )
    for launch in (on_bad, elsewhere):
        backend.deploy(launch)
        fake.set_pod_phase(k8s_cluster.namespace, pod_names(launch)[0], "Running")
    assert states(backend, "onbadnode1") == [(WorkerState.RUNNING, None)]

    fake.set_node_ready("gpu-node-1", False)
    assert backend.node_watcher.watch_once(timeout_seconds=5) == 1

    assert backend.bad_nodes() == {"gpu-node-1": "NotReady (NodeStatusUnknown)"}
    [worker] = backend.reports()["onbadnode1"].workers
    assert worker.state == WorkerState.FAILED and worker.exit_code is None
    assert worker.reason.startswith(f"{NODE_UNHEALTHY}: node gpu-node-1")
    assert backend.reports()["onbadnode1"].ended
    assert states(backend, "elsewhere1") == [(WorkerState.RUNNING, None)]
    assert [n.ready for n in backend.nodes() if n.name == "gpu-node-1"] == [False]

    backend.stop("onbadnode1", 30)  # its kubelet is gone: no grace to wait for
    assert [d.query["gracePeriodSeconds"] for d in fake.requests_for("DELETE", "pods")] == ["0"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda f: f.set_node_condition("gpu-node-1", "GpuUnhealthy", True, "EccErrors"),
         "GpuUnhealthy (EccErrors)"),
        (lambda f: f.set_node_condition("gpu-node-1", "XidError", True, "", "Xid 79"),
         "XidError (Xid 79)"),
        (lambda f: f.set_node_labels("gpu-node-1", {"trainyard.io/repair-state": "repairing"}),
         "trainyard.io/repair-state=repairing"),
        (lambda f: f.set_node_labels("gpu-node-1", {"trainyard.io/repair-state": "in_service"}),
         None),
        (lambda f: f.set_node_condition("gpu-node-1", "MemoryPressure", True), None),
        (lambda f: f.set_node_condition("gpu-node-1", "GpuUnhealthy", False), None),
    ],
    ids=["gpu-unhealthy", "xid", "in-repair", "in-service", "other-condition", "healthy-again"],
)  # fmt: skip
def test_node_problem_detector_conditions_and_the_repair_state_make_a_node_bad(
    k8s_cluster, backend, change, problem
):
    fake = k8s_cluster.require_fake()
    launch = a_launch(k8s_cluster, workers=1)
    backend.deploy(launch)
    fake.set_pod_phase(k8s_cluster.namespace, pod_names(launch)[0], "Running")
    backend.reports()  # the node cache is listed now; what follows comes by the watch

    change(fake)
    backend.node_watcher.watch_once(timeout_seconds=5)

    assert backend.bad_nodes().get("gpu-node-1") == problem
    [worker] = backend.reports()[JOB].workers
    expected = WorkerState.RUNNING if problem is None else WorkerState.FAILED
    assert worker.state == expected
    if problem:
        assert worker.reason == f"{NODE_UNHEALTHY}: node gpu-node-1: {problem}"


def test_a_pod_bound_to_a_deleted_node_fails(k8s_cluster, backend):
    fake = k8s_cluster.require_fake()
    backend.deploy(a_launch(k8s_cluster, workers=1))
    backend.reports()

    fake.delete_node("gpu-node-1")
    backend.node_watcher.watch_once(timeout_seconds=5)

    [worker] = backend.reports()[JOB].workers
    assert (worker.state, worker.reason) == (
        WorkerState.FAILED,
        f"{NODE_UNHEALTHY}: node gpu-node-1: node deleted",
    )


def test_the_node_watch_survives_an_expired_history_by_listing_again(k8s_cluster, backend):
    fake = k8s_cluster.require_fake()
    assert backend.bad_nodes() == {}
    fake.compact()  # the server forgot the history the watch would resume from
    fake.set_node_ready("gpu-node-2", False)
    fake.compact()

    backend.node_watcher.watch_once(timeout_seconds=5)  # 410 Gone: lists the nodes again

    assert set(backend.bad_nodes()) == {"gpu-node-2"}
    fake.set_node_ready("gpu-node-2", True)
    assert backend.node_watcher.watch_once(timeout_seconds=5) == 1  # and watches on
    assert backend.bad_nodes() == {}


def test_the_node_watcher_thread_follows_the_nodes(k8s_cluster):
    fake = k8s_cluster.require_fake()
    backend = KubernetesBackend(k8s_cluster.settings, api_client=k8s_cluster.api_client)
    try:
        assert backend.bad_nodes() == {}  # starts the watcher
        assert backend.node_watcher.running

        fake.set_node_condition("gpu-node-2", "XidError", True, "Xid79")

        wait_until(
            lambda: "gpu-node-2" in backend.bad_nodes(), 10, '"gpu-node-2" in backend.bad_nodes()'
        )
        fake.add_node("gpu-node-3", gpus=8)
        wait_until(
            lambda: "gpu-node-3" in {n.name for n in backend.nodes()},
            10,
            '"gpu-node-3" in {n.name for n in backend.nodes()}',
        )
    finally:
        backend.node_watcher.stop()
    assert not backend.node_watcher.running


def test_nodes_report_allocatable_gpus_cpus_memory_gpu_type_and_readiness(k8s_cluster, backend):
    nodes = {node.name: node for node in backend.nodes()}
    if k8s_cluster.fake is None:
        assert set(k8s_cluster.nodes) <= set(nodes)
        assert all(n.millicpus > 0 and n.memory > 0 for n in nodes.values())
        return
    gpu = nodes["gpu-node-1"]
    assert (gpu.gpu_type, gpu.gpus, gpu.millicpus, gpu.memory, gpu.ready) == (
        "NVIDIA-A100-SXM4-80GB",
        8,
        96_000,
        1024 * 1024,
        True,
    )
    assert gpu.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    cpu = nodes["cpu-node-1"]
    assert (cpu.gpu_type, cpu.gpus, cpu.millicpus, cpu.memory) == ("cpu", 0, 32_000, 128 * 1024)
    k8s_cluster.fake.set_node_labels("gpu-node-2", {"trainyard.io/gpu-type": "A100"})
    backend.node_watcher.watch_once(timeout_seconds=5)
    assert {n.name: n.gpu_type for n in backend.nodes()}["gpu-node-2"] == "A100"


def test_a_nodes_switch_and_rack_are_read_from_its_topology_labels(k8s_cluster, backend):
    if k8s_cluster.fake is None:
        pytest.skip("labels nodes of a real cluster")
    labels = {"trainyard.io/switch": "ib-leaf-3", "trainyard.io/rack": "r7"}
    k8s_cluster.fake.set_node_labels("gpu-node-2", labels)
    backend.node_watcher.watch_once(timeout_seconds=5)
    nodes = {node.name: node for node in backend.nodes()}
    assert (nodes["gpu-node-2"].switch, nodes["gpu-node-2"].rack) == ("ib-leaf-3", "r7")
    assert (nodes["gpu-node-1"].switch, nodes["gpu-node-1"].rack) == ("", "")


def test_cordon_patches_unschedulable(k8s_cluster, backend):
    node = k8s_cluster.nodes[0]
    try:
        backend.cordon(node, True)
        assert k8s_cluster.core.read_node(node).spec.unschedulable is True
    finally:
        backend.cordon(node, False)
    assert not k8s_cluster.core.read_node(node).spec.unschedulable
    if k8s_cluster.fake is not None:
        patches = k8s_cluster.fake.requests_for("PATCH", "nodes")
        assert [p.body for p in patches] == [
            {"spec": {"unschedulable": True}},
            {"spec": {"unschedulable": False}},
        ]


# --- the fake API server answers as a real one -------------------------------------------


def test_the_fake_api_server_answers_with_the_codes_and_bodies_of_a_real_one(k8s_cluster):
    fake = k8s_cluster.require_fake()
    core, namespace = k8s_cluster.core, k8s_cluster.namespace
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("nosuchpod", namespace)
    assert (missing.value.status, json.loads(missing.value.body)["reason"]) == (404, "NotFound")
    body = {"metadata": {"name": "p", "labels": {"a": "1", "b": "x"}}, "spec": {"containers": []}}
    core.create_namespaced_pod(namespace, body)
    with pytest.raises(client.ApiException) as twice:
        core.create_namespaced_pod(namespace, body)
    assert (twice.value.status, json.loads(twice.value.body)["reason"]) == (409, "AlreadyExists")
    # The client checks types itself; what it lets through, the server checks by schema.
    invalid = {"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "imagex": "i"}]}}
    refused = urllib3.request(
        "POST", f"{fake.url}/api/v1/namespaces/{namespace}/pods", json=invalid
    )
    assert refused.status == 422 and "imagex" in refused.json()["message"]
    assert refused.json()["kind"] == "Status" and refused.json()["reason"] == "Invalid"
    for selector, found in [
        ("a=1", True),
        ("a==1,b", True),
        ("a!=1", False),
        ("!a", False),
        ("b in (x, y)", True),
        ("b notin (x)", False),
        ("c", False),
    ]:
        names = [
            p.metadata.name
            for p in core.list_namespaced_pod(namespace, label_selector=selector).items
        ]
        assert names == (["p"] if found else []), selector


# --- the RBAC the docs give ---------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "kubernetes-backend.md"
REQUEST_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def test_the_rbac_in_the_docs_grants_exactly_the_verbs_the_backend_uses(k8s_cluster, backend):
    fake = k8s_cluster.require_fake()
    networking = client.NetworkingV1Api(k8s_cluster.api_client)
    outdated = {"metadata": {"name": job_policy_name(JOB)}, "spec": {"podSelector": {}}}
    networking.create_namespaced_network_policy(k8s_cluster.namespace, outdated)
    first = len(fake.requests)

    backend.deploy(a_launch(k8s_cluster))  # updates the outdated policy
    backend.deploy(a_launch(k8s_cluster, job_id="nlpjob0001", vc="nlp"))  # creates one
    k8s_cluster.settle(f"ty-{JOB}-1-0", "Succeeded", 0)
    backend.reports()  # reads the ended pod's log
    backend.stop(JOB, 5)
    backend.remove(JOB)
    backend.nodes()
    backend.cordon("gpu-node-1", True)
    backend.node_watcher.watch_once(timeout_seconds=5)

    used = {_permission(request) for request in fake.requests[first:]}
    assert used == granted_in_docs()


def _permission(request) -> tuple[str, str, str]:
    group = "networking.k8s.io" if request.path.startswith("/apis/networking.k8s.io/") else ""
    resource, named, subresource = re.search(
        r"/(pods|services|nodes|networkpolicies)(/[^/]+)?(/log)?$", request.path
    ).groups()
    if subresource:
        return group, f"{resource}{subresource}", "get"
    if request.method == "GET":
        verb = "get" if named else ("watch" if request.query.get("watch") == "true" else "list")
    else:
        verb = REQUEST_VERBS[request.method]
    return group, resource, verb


def granted_in_docs() -> set[tuple[str, str, str]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.DOTALL)
    granted = set()
    for document in (d for block in blocks for d in yaml.safe_load_all(block) if d):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        if document["kind"] in ("Role", "ClusterRole"):
            for rule in document["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted |= {(group, resource, verb) for verb in rule["verbs"]}
    return granted
