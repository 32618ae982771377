"""A Celery worker killed (SIGKILL) around the start of a worker's init, the inits forked by
the resident spawner (as run_trainyard runs them) rather than by a launcher: no job is
left stuck (the checks of tests/backend/jobmanager/test_crash_safe_deploy.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.backend.jobmanager.test_crash_safe_deploy import (  # noqa: F401 (fixtures)
    CrashingWorkers,
    backend,
    crash_each_time_at,
    workers,
)
from tests.spawner import running_spawner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

# The crash points around the start of an init, which the spawner forks.
SPAWN_POINTS = ["local-worker-recorded", "local-init-started", "local-pid-recorded"]


@pytest.fixture
def spawning_workers(workers, host_tmp) -> Iterator[CrashingWorkers]:  # noqa: F811
    """The workers, their inits forked by a resident spawner."""
    socket_path = host_tmp / "spawner.sock"
    with running_spawner(socket_path):
        workers.env["TRAINYARD_LOCAL_SPAWNER_SOCKET"] = str(socket_path)
        yield workers


@pytest.mark.parametrize("point", SPAWN_POINTS)
def test_a_worker_killed_while_the_spawner_starts_its_init_leaves_no_job_stuck(
    world,
    spawning_workers,
    backend,  # noqa: F811
    point,
):
    crash_each_time_at(world, spawning_workers, backend, point)
