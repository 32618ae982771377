"""An elastic job on the local backend, with real processes and real PyTorch on the CPU:
its workers (each a runc container on the job's network) run under torchrun's elastic
agent; a grow starts workers that join the rendezvous, a shrink stops the highest ranks,
and the training script (examples/train_elastic.py) goes on from its checkpoint at each
new size, its loss still going down."""

from __future__ import annotations

import itertools
import re
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from jobmanager.backends import JobLaunch, WorkerSpec, WorkerState
from jobmanager.backends.local import JOB_PATH, LocalBackend
from tests.jobmanager.conftest import NODES
from tests.jobmanager.test_local_backend import launch
from tests.polling import wait_until
from tests.sandbox_network import shared_with_jobs

TRAINING_ENV = Path("/opt/trainyard/training-env")
SCRIPT = Path(__file__).parents[2] / "examples" / "train_elastic.py"
STEP = re.compile(r"^step (\d+) world (\d+) loss ([\d.]+)$", re.M)
RESIZE_SECONDS = 120  # a re-rendezvous and gloo's start on loaded cores
# A resize's stop, as the product gives it: the workers end at once on SIGTERM, but a
# SIGKILL past a short grace on loaded cores can fall between a step's checkpoint and
# its log line (CI lost step 13 that way with 2 s).
GRACE_SECONDS = 30


@pytest.fixture
def backend(host_tmp) -> Iterator[LocalBackend]:
    if not (TRAINING_ENV / "bin" / "torchrun").exists():
        pytest.skip("no training environment with torchrun here (make training-env)")
    backend = LocalBackend(
        host_tmp / "state", host_tmp / "logs", nodes=NODES, cgroup_root=None,
        kill_after_seconds=1, sandbox="auto", sandbox_readonly_paths=shared_with_jobs(host_tmp),
        job_path=f"{TRAINING_ENV}/bin:{JOB_PATH}",
    )  # fmt: skip
    try:
        yield backend
    finally:
        for job_id in backend.reports():
            backend.remove(job_id)


def sized(elastic: JobLaunch, workers: int) -> JobLaunch:
    """The same attempt with ``workers`` workers, one GPU each on local-0."""
    specs = tuple(WorkerSpec(rank, "local-0", (rank,), 1000, 1024) for rank in range(workers))
    return replace(elastic, workers=specs)


def steps(backend: LocalBackend, job_id: str) -> list[tuple[int, int, float]]:
    """(step, world size, loss) as logged by whichever worker was rank 0, in step order."""
    logged: dict[int, tuple[int, int, float]] = {}
    for log in (backend.log_dir / job_id).glob("worker-*.log"):
        for step, world, loss in STEP.findall(log.read_text()):
            logged[int(step)] = (int(step), int(world), float(loss))
    return [logged[step] for step in sorted(logged)]


def logged_until(backend: LocalBackend, job_id: str, world: int, after: int, what: str) -> None:
    """Wait until steps past ``after`` were taken at ``world`` workers; if they never are,
    fail with what each worker logged last and what the backend reports."""
    try:
        wait_until(lambda: reached(backend, job_id, world, after), RESIZE_SECONDS, what)
    except AssertionError as timed_out:
        logs = "".join(
            f"--- {log.name}:\n{log.read_text()[-2000:]}\n"
            for log in sorted((backend.log_dir / job_id).glob("worker-*.log"))
        )
        pytest.fail(f"{timed_out}\n{backend.reports().get(job_id)}\n{logs}")


def reached(backend: LocalBackend, job_id: str, world: int, after: int) -> bool:
    """Whether steps past ``after`` were taken at ``world`` workers."""
    return any(s > after and w == world for s, w, _ in steps(backend, job_id))


def test_an_elastic_job_grows_and_shrinks_and_its_training_goes_on(backend, host_tmp):
    script = host_tmp / "train_elastic.py"
    shutil.copy(SCRIPT, script)
    command = f"python {script} --steps 100000 --step-seconds 0.05 --lr 0.001"
    elastic = sized(launch(command, min_workers=2, max_workers=4), 2)
    job_id = elastic.job_id
    backend.deploy(elastic)
    logged_until(backend, job_id, 2, 10, "10 steps at 2 workers")

    backend.resize(sized(elastic, 4), grace_seconds=GRACE_SECONDS)
    grown_at = max(s for s, w, _ in steps(backend, job_id) if w == 2)
    logged_until(backend, job_id, 4, grown_at + 10, "steps at 4")
    assert [w.state for w in backend.reports()[job_id].workers] == [WorkerState.RUNNING] * 4

    backend.resize(sized(elastic, 2), grace_seconds=GRACE_SECONDS)
    shrunk_at = max(s for s, w, _ in steps(backend, job_id) if w == 4)
    logged_until(backend, job_id, 2, shrunk_at + 10, "2 again")

    report = backend.reports()[job_id]
    assert [w.rank for w in report.workers] == [0, 1]
    assert all(w.state == WorkerState.RUNNING for w in report.workers)
    taken = steps(backend, job_id)
    worlds = [w for _, w, _ in taken]
    # 2, then 4, then 2 workers, in one run of steps that never went back to step 1.
    assert worlds[0] == 2 and 4 in worlds and worlds[-1] == 2
    assert [s for s, _, _ in taken] == list(range(1, len(taken) + 1))
    logs = "".join(p.read_text() for p in (backend.log_dir / job_id).glob("worker-*.log"))
    assert "resumed at step" in logs
    # The loss went down across both resizes (the global batch is kept at every size).
    losses = [loss for _, _, loss in taken]
    assert all(later <= earlier for earlier, later in itertools.pairwise(losses))
    assert losses[-1] < losses[grown_at] < losses[0]
