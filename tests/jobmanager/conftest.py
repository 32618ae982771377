"""The local backend, for the tests of it alone and of the isolation it keeps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobmanager.backends.local import LocalBackend

NODES = "local-0:A100:8,local-1:A100:8"


@pytest.fixture
def backend(host_tmp) -> Iterator[LocalBackend]:
    """A local backend whose state and logs lie where the jobs' accounts can reach them."""
    backend = LocalBackend(
        host_tmp / "state", host_tmp / "logs", nodes=NODES, cgroup_root=None, kill_after_seconds=1
    )
    yield backend
    for job_id in backend.reports():
        backend.remove(job_id)
