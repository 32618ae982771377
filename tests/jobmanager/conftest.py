"""The local backend, for the tests of it alone and of the isolation it keeps."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobmanager.backends.local import LocalBackend
from jobmanager.backends.sandbox import remove_cgroup_parent, remove_runtime_dir
from tests.sandbox_network import shared_with_jobs
from tests.spawner import running_spawner

NODES = "local-0:A100:8,local-1:A100:8"


@pytest.fixture(params=["exec", "spawner"])
def backend(request, host_tmp) -> Iterator[LocalBackend]:
    """A local backend whose state and logs lie where the jobs' accounts can reach them,
    with the default sandbox (runc as root: the test's directory shared with the jobs);
    its workers' inits started as fresh interpreters ("exec"), or forked by the resident
    spawner ("spawner", as run_trainyard runs it): every test holds for both."""
    with _local_backend(host_tmp, request.param, "auto") as backend:
        yield backend


@pytest.fixture(params=["exec", "spawner"])
def bare_backend(request, host_tmp) -> Iterator[LocalBackend]:
    """The same backend running bare processes (``sandbox="none"``), for what only they do
    (rlimits, sessions entered with ``confine.enter``)."""
    with _local_backend(host_tmp, request.param, "none") as backend:
        yield backend


@contextlib.contextmanager
def _local_backend(host_tmp: Path, inits: str, sandbox: str) -> Iterator[LocalBackend]:
    socket_path = host_tmp / "spawner.sock" if inits == "spawner" else None
    with running_spawner(socket_path) if socket_path else contextlib.nullcontext():
        backend = LocalBackend(
            host_tmp / "state", host_tmp / "logs", nodes=NODES, cgroup_root=None,
            kill_after_seconds=1, spawner_socket=socket_path, sandbox=sandbox,
            sandbox_readonly_paths=shared_with_jobs(host_tmp),
        )  # fmt: skip
        try:
            yield backend
        finally:
            remove_every_job(backend)


def remove_every_job(backend: LocalBackend) -> None:
    """Every job of a test's backend removed, and its containers' cgroup parent."""
    for job_id in backend.reports():
        backend.remove(job_id)
    backend.finish_removals()
    remove_cgroup_parent(backend.state_dir)
    remove_runtime_dir(backend.state_dir)
