"""Ends of local workers noticed as they happen: each init reports its end on a socket,
the listener calls back once the init is gone, and the backend then reports the job
ended (no waiting for a periodic pass, no sleep in the test: an event)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobmanager.backends.local import LocalBackend
from jobmanager.backends.local_ends import EndListener
from tests.jobmanager.conftest import NODES
from tests.jobmanager.test_local_backend import launch


@pytest.fixture
def notified(host_tmp) -> Iterator[tuple[LocalBackend, list[str], threading.Event]]:
    """A backend whose inits report to a listener; the jobs reported; an event set on each."""
    socket_path = Path(host_tmp) / "ends.sock"
    backend = LocalBackend(
        host_tmp / "state", host_tmp / "logs", nodes=NODES, cgroup_root=None,
        kill_after_seconds=1, notify_socket=socket_path,
    )  # fmt: skip
    listener = EndListener(socket_path)
    reported: list[str] = []
    ended = threading.Event()
    stop = threading.Event()

    def on_end(job_id: str) -> None:
        reported.append(job_id)
        ended.set()

    thread = threading.Thread(target=listener.serve, args=(on_end, stop), daemon=True)
    thread.start()
    yield backend, reported, ended
    stop.set()
    thread.join(timeout=10)
    listener.close()
    for job_id in backend.reports():
        backend.remove(job_id)


def test_an_end_is_reported_at_once_and_the_backend_already_sees_it(notified):
    backend, reported, ended = notified
    job = launch("exit 3")

    backend.deploy(job)

    assert ended.wait(timeout=20), "no end was reported"
    assert reported == [job.job_id]
    report = backend.reports()[job.job_id]  # read when told, not polled for
    assert report.ended and report.failed_worker.exit_code == 3


def test_a_running_job_reports_nothing_until_it_is_stopped(notified):
    backend, reported, ended = notified
    job = launch("sleep 600")
    backend.deploy(job)
    assert not backend.reports()[job.job_id].ended

    backend.stop(job.job_id, grace_seconds=5)

    assert ended.wait(timeout=20), "the stop's end was not reported"
    assert reported == [job.job_id]
    assert backend.reports()[job.job_id].ended


def test_the_socket_is_the_listeners_alone(notified, host_tmp):
    assert (Path(host_tmp) / "ends.sock").stat().st_mode & 0o777 == 0o600
