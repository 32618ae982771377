"""A Kubernetes API server for tests, and the fixtures that hand one out.

``fake_kubernetes`` is the in-process fake (see :mod:`tests.k8s_fake.server`);
``fake_api_client`` a ``kubernetes.client.ApiClient`` pointing at it. ``k8s_cluster`` is
what the backend tests run against: the fake, or the real cluster that ``KUBECONFIG``
names (kind, k3s), in a namespace of its own that is deleted afterwards. Tests that need
failure injection call ``k8s_cluster.require_fake()``, which skips them on a real
cluster. ``fake_clock`` is a time the test moves on, for the backend's ``clock`` (the
start timeout).

Use them from a test module with ``pytest_plugins = ["tests.k8s_fake"]``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from kubernetes import client, config

from jobmanager.backends.k8s_manifests import KubernetesSettings, VolumeSettings
from tests.k8s_fake.server import FakeKubernetes, RecordedRequest, matches_selector

__all__ = [
    "FakeClock",
    "FakeKubernetes",
    "KubernetesTestCluster",
    "RecordedRequest",
    "fake_api_client",
    "fake_clock",
    "fake_kubernetes",
    "fake_settings",
    "k8s_cluster",
    "matches_selector",
]

FAKE_NAMESPACE = "trainyard-jobs"
FAKE_NODES = ("gpu-node-1", "gpu-node-2")
FAKE_GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
REAL_CLUSTER_WAIT_SECONDS = 180


@dataclass
class KubernetesTestCluster:
    """Where the backend tests run: the fake, or a real cluster."""

    api_client: client.ApiClient
    settings: KubernetesSettings
    nodes: list[str]  # two node names to place workers on (the same twice on one node)
    gpus_per_worker: int  # what the nodes can give each of two workers
    fake: FakeKubernetes | None = None
    core: client.CoreV1Api = field(init=False)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api_client)

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def require_fake(self) -> FakeKubernetes:
        if self.fake is None:
            pytest.skip("injects failures: runs against the fake API server only")
        return self.fake

    def settle(self, pod: str, phase: str, exit_code: int | None = None) -> None:
        """The pod reaches ``phase``: the fake is told so; on a real cluster the pod's own
        command gets it there, and this waits until it has."""
        if self.fake is not None:
            self.fake.set_pod_phase(self.namespace, pod, phase, exit_code)
            return
        deadline = time.monotonic() + REAL_CLUSTER_WAIT_SECONDS
        while time.monotonic() < deadline:
            status = self.core.read_namespaced_pod(pod, self.namespace).status
            if status.phase == phase:
                return
            time.sleep(1)  # polling a real cluster, with a deadline
        raise AssertionError(f"pod {pod} did not reach {phase} in {REAL_CLUSTER_WAIT_SECONDS} s")


class FakeClock:
    """The backend's time, moved on by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake_kubernetes() -> Iterator[FakeKubernetes]:
    fake = FakeKubernetes().start()
    yield fake
    fake.stop()


@pytest.fixture
def fake_api_client(fake_kubernetes: FakeKubernetes) -> Iterator[client.ApiClient]:
    api_client = fake_kubernetes.api_client()
    yield api_client
    api_client.close()


def fake_settings(namespace: str = FAKE_NAMESPACE) -> KubernetesSettings:
    """Settings that use every feature, so that every part of a manifest is validated."""
    return KubernetesSettings(
        namespace=namespace,
        image_pull_secrets=("registry-credentials",),
        default_image="registry.example.com/trainyard/base:1",
        data_volume=VolumeSettings.parse("nfs://nfs.example.com/export/data", "/data", True),
        output_volume=VolumeSettings.parse("pvc://trainyard-output", "/output"),
        grace_seconds=30,
    )


@pytest.fixture
def k8s_cluster(request) -> Iterator[KubernetesTestCluster]:
    if os.environ.get("KUBECONFIG"):
        yield from _real_cluster()
        return
    fake = request.getfixturevalue("fake_kubernetes")
    for name in FAKE_NODES:
        fake.add_node(name, gpus=8, labels={"nvidia.com/gpu.product": FAKE_GPU_PRODUCT})
    fake.add_node("cpu-node-1", gpus=0, cpu="32", memory="128Gi")
    api_client = request.getfixturevalue("fake_api_client")
    yield KubernetesTestCluster(api_client, fake_settings(), list(FAKE_NODES), 4, fake)


def _real_cluster() -> Iterator[KubernetesTestCluster]:
    configuration = client.Configuration()
    config.load_kube_config(client_configuration=configuration)
    api_client = client.ApiClient(configuration)
    core = client.CoreV1Api(api_client)
    ready = [
        node
        for node in core.list_node().items
        if not node.spec.unschedulable
        and any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    ]
    control_plane = "node-role.kubernetes.io/control-plane"
    workers = [n for n in ready if control_plane not in (n.metadata.labels or {})]
    chosen = (workers or ready)[:2]
    if not chosen:
        pytest.skip("the cluster KUBECONFIG names has no Ready node")
    names = [node.metadata.name for node in chosen]
    gpus = min(int((n.status.allocatable or {}).get("nvidia.com/gpu", "0")) for n in chosen)
    namespace = f"trainyard-test-{uuid.uuid4().hex[:8]}"
    settings = KubernetesSettings(
        namespace=namespace,
        default_image=os.environ.get("TRAINYARD_TEST_K8S_IMAGE", "busybox:1.36"),
        # busybox has no tini; an image that has one may name it here.
        init_command=tuple(os.environ.get("TRAINYARD_TEST_K8S_INIT", "").split()),
        grace_seconds=5,
    )
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        yield KubernetesTestCluster(
            api_client,
            settings,
            (names * 2)[:2],
            min(1, gpus // (2 if len(set(names)) == 1 else 1)),
        )
    finally:
        core.delete_namespace(namespace)
        api_client.close()
