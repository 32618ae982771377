"""The live system of the job manager's tests: gunicorn, real Celery workers and beat on the
test database and Redis, the memory backend's state shared through a file; and the cluster
of FfDL's experiment (15 nodes of 4 GPUs) with a member holding a token."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from backend.accounts.actions import create_api_token
from jobmanager.backends.memory import MemoryBackend
from tests import servers
from tests.factories import (
    GpuTypeFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    UserFactory,
    VirtualClusterFactory,
)
from tests.servers import start_celery

GIB = 1024


@dataclass
class LiveSystem:
    base_url: str
    token: str
    backend: MemoryBackend
    env: dict[str, str]

    def submit(self, body: dict) -> str:
        response = requests.post(
            f"{self.base_url}/api/v1/jobs/",
            json=body,
            headers={"Authorization": f"Token {self.token}"},
            timeout=30,
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def batch(self, action: str, ids: list[str]) -> None:
        response = requests.post(
            f"{self.base_url}/api/v1/jobs/batch/",
            json={"action": action, "ids": ids},
            headers={"Authorization": f"Token {self.token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text


def live_env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    return servers.live_env(tmp_path, redis_url, "live") | {
        "TRAINYARD_BACKEND": "memory",
        "TRAINYARD_MEMORY_BACKEND_STATE": str(tmp_path / "memory-backend.json"),
    }


def start_worker(env: dict[str, str], name: str) -> subprocess.Popen:
    return start_celery(
        env, "worker", "--concurrency", "2", "--hostname", f"{name}@%h", "--without-gossip",
        "--without-mingle", "--without-heartbeat",
    )  # fmt: skip


def start_beat(env: dict[str, str], directory: Path) -> subprocess.Popen:
    return start_celery(env, "beat", "--schedule", str(directory / "celerybeat-schedule"))


@pytest.fixture
def ffdl_cluster(db):
    """15 nodes of 4 GPUs, one VC whose quota is all of them, one member with a token."""
    v100 = GpuTypeFactory(name="V100", cpus_per_gpu=4, memory_per_gpu=16 * GIB)
    for index in range(15):
        NodeFactory(name=f"v100-{index:02}", gpu_type=v100, gpus=4, cpus=16, memory=64 * GIB)
    vc = VirtualClusterFactory(name="ffdl")
    QuotaFactory(vc=vc, gpu_type=v100, gpus=60, cpus=240, memory=960 * GIB)
    user = UserFactory(username="fay")
    MembershipFactory(vc=vc, user=user)
    _, token = create_api_token(user, "live")
    return token
