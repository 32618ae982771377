"""The local backend, for the tests of it alone and of the isolation it keeps."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from jobmanager.backends.local import LocalBackend
from tests.spawner import running_spawner

NODES = "local-0:A100:8,local-1:A100:8"


@pytest.fixture(params=["exec", "spawner"])
def backend(request, host_tmp) -> Iterator[LocalBackend]:
    """A local backend whose state and logs lie where the jobs' accounts can reach them;
    its workers' inits started as fresh interpreters ("exec"), or forked by the resident
    spawner ("spawner", as run_trainyard runs it): every test holds for both."""
    socket_path = host_tmp / "spawner.sock" if request.param == "spawner" else None
    with running_spawner(socket_path) if socket_path else contextlib.nullcontext():
        backend = LocalBackend(
            host_tmp / "state", host_tmp / "logs", nodes=NODES, cgroup_root=None,
            kill_after_seconds=1, spawner_socket=socket_path,
        )  # fmt: skip
        yield backend
        for job_id in backend.reports():
            backend.remove(job_id)
