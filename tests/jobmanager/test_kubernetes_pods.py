"""The Kubernetes backend's view of its pods, against the fake API server playing the
kubelet: workers' logs streamed into the log store, why a worker failed (termination
reasons, disruptions), a worker that never starts, and the GPUs the device plugin gave."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobmanager.backends import JobLaunch, WorkerSpec, WorkerState
from jobmanager.backends.base import STOPPED
from jobmanager.backends.k8s_logs import timestamp_key
from jobmanager.backends.kubernetes import KubernetesBackend
from tests.jobmanager.test_kubernetes_backend import MIA
from tests.polling import wait_until

pytest_plugins = ["tests.k8s_fake"]

JOB = "p7x2k9m4qa"


@pytest.fixture
def fake(k8s_cluster):
    return k8s_cluster.require_fake()


@pytest.fixture
def clock(fake_clock):
    return fake_clock


@pytest.fixture
def log_dir(tmp_path) -> Path:
    return tmp_path / "logs"


def make_backend(k8s_cluster, log_dir: Path, clock) -> KubernetesBackend:
    return KubernetesBackend(
        k8s_cluster.settings,
        api_client=k8s_cluster.api_client,
        watch_nodes=False,
        log_dir=log_dir,
        clock=clock,
    )


@pytest.fixture
def backend(k8s_cluster, log_dir, clock):
    backend = make_backend(k8s_cluster, log_dir, clock)
    yield backend
    backend.logs.stop()
    backend.node_watcher.stop()


def launch(cluster, workers: int = 1, gpus: tuple[int, ...] = (0, 1), job_id: str = JOB):
    return JobLaunch(
        job_id=job_id,
        attempt=1,
        name="resnet",
        owner="mia",
        vc="vision",
        command="python train.py",
        workers=tuple(
            WorkerSpec(rank, cluster.nodes[0], gpus, 500, 512) for rank in range(workers)
        ),
        run_as=MIA,
    )


def pod(rank: int = 0, job_id: str = JOB) -> str:
    return f"ty-{job_id}-1-{rank}"


def worker(backend, rank: int = 0):
    return backend.reports()[JOB].workers[rank]


def log_text(log_dir: Path, rank: int = 0) -> str:
    path = log_dir / JOB / f"worker-{rank}.log"
    return path.read_text() if path.exists() else ""


# --- logs ---------------------------------------------------------------------------------


def test_a_running_pods_log_streams_into_the_store_and_outlives_the_pod(
    k8s_cluster, fake, backend, log_dir
):
    ns = k8s_cluster.namespace
    backend.deploy(launch(k8s_cluster))
    fake.set_pod_phase(ns, pod(), "Running")
    fake.write_pod_log(ns, pod(), "epoch 1 loss 2.31\n")

    assert worker(backend).state == WorkerState.RUNNING  # and its log is being followed
    wait_until(lambda: "epoch 1 loss 2.31" in log_text(log_dir), 10, "the log follower")
    fake.write_pod_log(ns, pod(), "epoch 2 loss 1.87\n")
    wait_until(lambda: "epoch 2 loss 1.87" in log_text(log_dir), 10, "the line as it comes")
    follows = [r for r in fake.requests_for("GET", "pods") if r.path.endswith("/log")]
    assert follows and follows[0].query["follow"] == "true"

    fake.write_pod_log(ns, pod(), "saved checkpoint")  # no newline: the container's last
    fake.set_pod_phase(ns, pod(), "Succeeded", exit_code=0)
    assert worker(backend).state == WorkerState.SUCCEEDED
    backend.remove(JOB)

    assert fake.list("pods", ns) == []
    lines = log_text(log_dir).splitlines()
    assert lines[0].startswith(f"=== attempt 1 on {k8s_cluster.nodes[0]} at ")
    assert lines[0].endswith(f"(pod {pod()}) ===")
    assert lines[1:] == [
        "epoch 1 loss 2.31",
        "epoch 2 loss 1.87",
        "saved checkpoint",
        "=== attempt 1 ended: exit code 0 ===",
    ]


def test_a_pod_that_ended_between_two_looks_has_all_its_log_before_it_is_reported_ended(
    k8s_cluster, fake, backend, log_dir
):
    ns = k8s_cluster.namespace
    backend.deploy(launch(k8s_cluster))
    fake.set_pod_phase(ns, pod(), "Running")
    fake.write_pod_log(ns, pod(), "".join(f"step {n}\n" for n in range(500)))
    fake.set_pod_phase(ns, pod(), "Failed", exit_code=137, reason="OOMKilled")

    report = worker(backend)

    assert (report.state, report.exit_code, report.reason) == (WorkerState.FAILED, 137, "OOMKilled")
    text = log_text(log_dir)
    assert text.count("step ") == 500 and "step 499\n" in text
    assert text.endswith("=== attempt 1 ended: exit code 137 (OOMKilled) ===\n")


def test_another_process_takes_over_a_dead_followers_log_without_repeating_a_line(
    k8s_cluster, fake, backend, log_dir, clock
):
    ns = k8s_cluster.namespace
    backend.deploy(launch(k8s_cluster))
    fake.set_pod_phase(ns, pod(), "Running")
    fake.write_pod_log(ns, pod(), "one\ntwo\nthree\n")  # written within the same microseconds
    backend.reports()
    wait_until(lambda: "three" in log_text(log_dir), 10, "the log follower")
    backend.logs.stop()  # the process following it dies

    other = make_backend(k8s_cluster, log_dir, clock)  # another Celery worker's backend
    try:
        fake.write_pod_log(ns, pod(), "four\n")
        other.reports()
        wait_until(lambda: "four" in log_text(log_dir), 10, "the log follower")
        fake.set_pod_phase(ns, pod(), "Succeeded", exit_code=0)
        assert other.reports()[JOB].workers[0].state == WorkerState.SUCCEEDED
    finally:
        other.close()

    body = log_text(log_dir).splitlines()[1:-1]
    assert body == ["one", "two", "three", "four"]
    resumed = [r for r in fake.requests_for("GET", "pods") if r.path.endswith("/log")][1:]
    assert all(int(r.query["sinceSeconds"]) >= 1 for r in resumed)


def test_two_processes_never_follow_the_same_pod_at_once(
    k8s_cluster, fake, backend, log_dir, clock
):
    ns = k8s_cluster.namespace
    backend.deploy(launch(k8s_cluster))
    fake.set_pod_phase(ns, pod(), "Running")
    other = make_backend(k8s_cluster, log_dir, clock)
    try:
        backend.reports()
        other.reports()
        fake.write_pod_log(ns, pod(), "only once\n")
        wait_until(lambda: "only once" in log_text(log_dir), 10, "the log follower")
        fake.set_pod_phase(ns, pod(), "Succeeded", exit_code=0)
        assert backend.reports()[JOB].workers[0].state == WorkerState.SUCCEEDED
        assert other.reports()[JOB].workers[0].state == WorkerState.SUCCEEDED
    finally:
        other.close()

    assert log_text(log_dir).count("only once") == 1
    assert log_text(log_dir).count("=== attempt 1 ended") == 1


def test_log_timestamps_compare_by_time_whatever_their_precision():
    coarse = timestamp_key(b"2026-12-01T10:00:00.1Z")
    fine = timestamp_key(b"2026-12-01T10:00:00.12Z")
    whole = timestamp_key(b"2026-12-01T10:00:00Z")

    assert whole < coarse < fine  # as strings, ".1Z" sorts after ".12Z"
    from tests.k8s_fake.kubelet import rfc3339_nano  # once pytest has loaded the plugin

    stamped = rfc3339_nano(datetime(2026, 1, 1, 0, 0, 0, 120000, tzinfo=UTC)).encode()
    assert stamped == b"2026-01-01T00:00:00.12Z"
    assert timestamp_key(stamped) == ("2026-01-01T00:00:00", 120_000_000)


# --- why a worker failed ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f, ns: f.set_pod_phase(ns, pod(), "Failed", 137, reason="OOMKilled"), "OOMKilled"),
        (
            lambda f, ns: f.set_pod_phase(
                ns, pod(), "Failed", 128, reason="StartError", message='exec: "python": not found'
            ),
            'StartError: exec: "python": not found',
        ),
        (
            lambda f, ns: (
                f.set_pod_condition(ns, pod(), "DisruptionTarget", True, "TerminationByKubelet",
                                    "The node was low on resource: memory."),
                f.set_pod_phase(ns, pod(), "Failed", 137),
            ),
            "DisruptionTarget: TerminationByKubelet: The node was low on resource: memory.",
        ),
        (
            lambda f, ns: (
                f.set_pod_phase(ns, pod(), "Failed", 137),
                f.set_pod_reason(ns, pod(), "DeadlineExceeded", "Pod was active too long"),
            ),
            "DeadlineExceeded: Pod was active too long",
        ),
    ],
)  # fmt: skip
def test_a_failed_worker_carries_the_reason_the_cluster_gave(
    k8s_cluster, fake, backend, change, reason
):
    backend.deploy(launch(k8s_cluster))
    fake.set_pod_phase(k8s_cluster.namespace, pod(), "Running")

    change(fake, k8s_cluster.namespace)

    assert worker(backend).reason == reason


def test_workers_stopped_after_a_peer_failed_leave_the_peer_to_explain_the_attempt(
    k8s_cluster, fake, backend
):
    ns = k8s_cluster.namespace
    backend.deploy(launch(k8s_cluster, workers=3, gpus=(0,)))
    for rank in range(3):
        fake.set_pod_phase(ns, pod(rank), "Running")
    fake.set_pod_phase(ns, pod(2), "Failed", 137, reason="OOMKilled")

    backend.stop(JOB, 30)  # the gang cannot go on
    fake.finish_deletion(ns, pod(0))
    fake.set_pod_phase(ns, pod(1), "Failed", 143)  # ended by SIGTERM, then removed
    report = backend.reports()[JOB]

    assert [w.reason for w in report.workers] == [STOPPED, STOPPED, "OOMKilled"]
    assert report.ended and report.failed_worker.rank == 2


# --- a worker that never starts -----------------------------------------------------------


def test_a_pod_that_cannot_pull_its_image_fails_after_the_start_timeout_and_stays_till_removed(
    k8s_cluster, fake, backend, clock, log_dir
):
    ns = k8s_cluster.namespace
    backend.deploy(launch(k8s_cluster))
    fake.set_pod_phase(
        ns, pod(), "Pending", waiting_reason="ImagePullBackOff",
        message='Back-off pulling image "pytorch/pytorch:9.9"',
    )  # fmt: skip
    timeout = k8s_cluster.settings.start_timeout_seconds
    clock.now += timeout - 5
    assert worker(backend).state == WorkerState.PENDING  # the back-off may still succeed

    clock.now += 10
    report = worker(backend)
    backend.stop(JOB, 30)

    assert report.state == WorkerState.FAILED
    assert report.reason == (
        f'ImagePullBackOff: Back-off pulling image "pytorch/pytorch:9.9"; '
        f"not running after {timeout} s"
    )
    assert fake.get("pods", pod(), ns) is not None  # kept, with its reason, till removed
    assert backend.reports()[JOB].failed_worker.reason == report.reason
    assert log_text(log_dir).endswith(
        'attempt 1 did not start: ImagePullBackOff: Back-off pulling image "pytorch/pytorch:9.9"'
        " ===\n"
    )
    backend.remove(JOB)
    assert fake.list("pods", ns) == []


def test_an_unschedulable_pod_says_so_when_it_times_out(k8s_cluster, fake, backend, clock):
    backend.deploy(launch(k8s_cluster))
    fake.set_pod_condition(
        k8s_cluster.namespace, pod(), "PodScheduled", False, "Unschedulable",
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    )  # fmt: skip
    clock.now += k8s_cluster.settings.start_timeout_seconds + 1

    assert worker(backend).reason.startswith(
        "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.; not running"
    )


# --- the GPUs a pod got -----------------------------------------------------------------


def test_the_device_plugin_picks_the_gpus_whatever_the_scheduler_recorded(
    k8s_cluster, fake, backend
):
    other = launch(k8s_cluster, gpus=(4, 5, 6, 7), job_id="other00001")
    mine = launch(k8s_cluster, gpus=(0, 1, 2, 3))
    backend.deploy(other)  # deployed first: the device plugin gives it the first free GPUs
    backend.deploy(mine)

    ns = k8s_cluster.namespace
    assert fake.pod_devices(ns, pod(job_id="other00001")) == [0, 1, 2, 3]
    assert fake.pod_devices(ns, pod()) == [4, 5, 6, 7]


# --- the fake's log endpoint ------------------------------------------------------------


def test_the_fake_log_endpoint_answers_as_a_real_api_server(k8s_cluster, fake, backend):
    from kubernetes import client

    core, ns = k8s_cluster.core, k8s_cluster.namespace
    backend.deploy(launch(k8s_cluster))
    with pytest.raises(client.ApiException) as waiting:
        core.read_namespaced_pod_log(pod(), ns)
    assert waiting.value.status == 400 and "is waiting to start" in waiting.value.body
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod_log("no-such-pod", ns)
    assert missing.value.status == 404

    fake.set_pod_phase(ns, pod(), "Running")
    fake.write_pod_log(ns, pod(), "a\nb\nc\n")
    assert core.read_namespaced_pod_log(pod(), ns) == "a\nb\nc\n"
    assert core.read_namespaced_pod_log(pod(), ns, tail_lines=2) == "b\nc\n"
    assert core.read_namespaced_pod_log(pod(), ns, limit_bytes=3) == "a\nb"
    stamped = core.read_namespaced_pod_log(pod(), ns, timestamps=True).splitlines()
    assert all(timestamp_key(line.split(" ")[0].encode()) for line in stamped)
    follow = core.read_namespaced_pod_log(pod(), ns, follow=True, _preload_content=False)
    fake.set_pod_phase(ns, pod(), "Succeeded", exit_code=0)  # the stream then ends
    assert b"".join(follow.stream()) == b"a\nb\nc\n"
