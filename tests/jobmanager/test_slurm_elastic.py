"""An elastic job on the real Slurm cluster of three nodes in network namespaces, with real
PyTorch on the CPU (examples/train_elastic.py, gloo): each resize is a new allocation of
the new size (jobmanager/backends/slurm_rounds.py), every worker under torchrun's agent;
the training goes on from its checkpoint at each size, never from step 0. A resize cut
short (the job manager killed before sbatch, or the new allocation refused) loses no job."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from jobmanager.backends import DeployError, JobLaunch, WorkerSpec, WorkerState
from jobmanager.backends.local import JOB_PATH
from jobmanager.backends.slurm import SlurmBackend
from tests.polling import wait_until
from tests.slurm_cluster import wait_until_idle
from tests.unix_accounts import job_account, reachable_directory, require_root

TRAINING_ENV = Path("/opt/trainyard/training-env")
SCRIPT = Path(__file__).parents[2] / "examples" / "train_elastic.py"
STEP = re.compile(r"^step (\d+) world (\d+) loss ([\d.]+)$", re.M)
RESIZE_SECONDS = 120.0  # a new allocation, torchrun's rendezvous and gloo on loaded cores
# A stop's grace: the example finishes its step (saved and logged, SIGTERM held) and
# torchrun's agents shut down within it even on loaded cores; a kill past a short grace
# (5 s on CI) could cut a step between its checkpoint and its log line.
GRACE_SECONDS = 30
REPOSITORY = Path(__file__).parents[2]


@pytest.fixture
def backend(slurm_cluster) -> Iterator[SlurmBackend]:
    require_root()
    if not (TRAINING_ENV / "bin" / "torchrun").exists():
        pytest.skip("no training environment with torchrun here (make training-env)")
    with reachable_directory() as directory:
        backend = SlurmBackend(
            directory / "state", directory / "logs", str(slurm_cluster.conf),
            job_path=f"{TRAINING_ENV}/bin:{JOB_PATH}",
        )  # fmt: skip
        script = directory / "train_elastic.py"
        shutil.copy(SCRIPT, script)
        script.chmod(0o644)
        try:
            yield backend
        finally:
            for job_id in backend.reports():
                backend.stop(job_id, 0)
                backend.remove(job_id)
            # Every allocation, the retired ones too, ends and gives its nodes back.
            wait_until_idle(slurm_cluster, slurm_cluster.nodes, RESIZE_SECONDS)


def elastic(backend: SlurmBackend, job_id: str, nodes: tuple[str, ...]) -> JobLaunch:
    """Attempt 1 of a 2..3-worker job, one worker (one GPU) on each of ``nodes``."""
    account = job_account("conform")
    script = backend.state_dir.parent / "train_elastic.py"
    return JobLaunch(
        job_id=job_id, attempt=1, name="elastic", owner=account.name, vc="vision",
        command=f"python {script} --steps 100000 --step-seconds 0.05 --lr 0.001",
        workers=sized(nodes), run_as=account, min_workers=2, max_workers=3,
    )  # fmt: skip


def sized(nodes: tuple[str, ...]) -> tuple[WorkerSpec, ...]:
    return tuple(WorkerSpec(rank, node, (0,), 1000, 1024) for rank, node in enumerate(nodes))


def steps(backend: SlurmBackend, job_id: str) -> list[tuple[int, int, float]]:
    """(step, world size, loss) as logged by whichever worker was rank 0, in step order."""
    logged: dict[int, tuple[int, int, float]] = {}
    for log in (backend.log_dir / job_id).glob("worker-*.log"):
        for step, world, loss in STEP.findall(log.read_text()):
            logged[int(step)] = (int(step), int(world), float(loss))
    return [logged[step] for step in sorted(logged)]


def logs_of(backend: SlurmBackend, job_id: str) -> dict[str, str]:
    """Every log of the job's (its workers', its rounds' batch logs), each file's end: what
    a failed assertion on its steps shows."""
    return {
        str(path): path.read_text()[-3000:]
        for directory in (backend.log_dir, backend.state_dir)
        for path in sorted((directory / job_id).rglob("*.log"))
    }


def reached(backend: SlurmBackend, job_id: str, world: int, after: int) -> bool:
    return any(s > after and w == world for s, w, _ in steps(backend, job_id))


def last_step(backend: SlurmBackend, job_id: str) -> int:
    return max((s for s, _, _ in steps(backend, job_id)), default=0)


def allocations(backend: SlurmBackend, job_id: str) -> list[tuple[str, str]]:
    """(Slurm state, nodes) of the job's allocations Slurm has not ended."""
    return [
        (job.state, job.nodes)
        for job in backend.slurm.jobs()
        if job.name.startswith(f"ty-{job_id}-") and not job.ended
    ]


def test_an_elastic_job_grows_and_shrinks_by_new_allocations_and_its_training_goes_on(backend):
    launch = elastic(backend, "grow000001", ("node1", "node2"))
    backend.deploy(launch)
    wait_until(lambda: reached(backend, "grow000001", 2, 5), RESIZE_SECONDS, "5 steps at 2")

    grown = replace(launch, workers=sized(("node1", "node2", "node3")))
    backend.resize(grown, grace_seconds=GRACE_SECONDS)
    grown_at = last_step(backend, "grow000001")

    # While the old allocation ends and the new one waits for it: pending, never failed.
    resizing = backend.reports()["grow000001"]
    assert [w.state for w in resizing.workers] == [WorkerState.PENDING] * 3
    wait_until(lambda: reached(backend, "grow000001", 3, grown_at), RESIZE_SECONDS, "steps at 3")
    report = backend.reports()["grow000001"]
    assert (report.attempt, [w.state for w in report.workers]) == (1, [WorkerState.RUNNING] * 3)
    assert allocations(backend, "grow000001") == [("RUNNING", "node[1-3]")]  # the old one ended

    backend.resize(replace(launch, workers=sized(("node1", "node2"))), grace_seconds=GRACE_SECONDS)
    shrunk_at = last_step(backend, "grow000001")
    wait_until(lambda: reached(backend, "grow000001", 2, shrunk_at), RESIZE_SECONDS, "2 again")

    # node3's GPU is back: a job taking all four of node3's GPUs starts.
    other = replace(
        launch, job_id="node3all01", command="sleep 600", min_workers=0, max_workers=0,
        workers=(WorkerSpec(0, "node3", (0, 1, 2, 3), 1000, 64),),
    )  # fmt: skip
    backend.deploy(other)
    wait_until(lambda: backend.reports()["node3all01"].started, RESIZE_SECONDS, "node3 free")

    report = backend.reports()["grow000001"]
    assert [(w.rank, w.state) for w in report.workers] == [(0, WorkerState.RUNNING), (1, "running")]
    assert allocations(backend, "grow000001") == [("RUNNING", "node[1-2]")]
    taken = steps(backend, "grow000001")
    worlds = [w for _, w, _ in taken]
    # 2, then 3, then 2 workers, in one run of steps that never went back to step 1.
    assert worlds[0] == 2 and 3 in worlds and worlds[-1] == 2
    numbers = [s for s, _, _ in taken]
    assert numbers == list(range(1, len(taken) + 1)), logs_of(backend, "grow000001")
    logs = "".join(p.read_text() for p in (backend.log_dir / "grow000001").glob("worker-*.log"))
    assert "resumed at step" in logs and "with world 3" in logs
    losses = [loss for _, _, loss in taken]
    assert losses[-1] < losses[grown_at - 1] < losses[0]


def test_a_resize_cut_short_by_a_killed_job_manager_is_finished_by_the_next_one(backend):
    launch = elastic(backend, "crash00001", ("node1", "node2"))
    backend.deploy(launch)
    wait_until(lambda: reached(backend, "crash00001", 2, 5), RESIZE_SECONDS, "5 steps at 2")
    grown = replace(launch, workers=sized(("node1", "node2", "node3")))

    # The job manager's process resizes, and is killed (SIGKILL) before sbatch runs.
    arguments = backend.state_dir.parent / "resize.pickle"
    arguments.write_bytes(
        pickle.dumps(
            (backend.state_dir, backend.log_dir, backend.slurm.conf, backend.job_path, grown)
        )
    )
    resize = (
        "import pickle, sys; from jobmanager.backends.slurm import SlurmBackend; "
        "state, logs, conf, path, launch = pickle.loads(open(sys.argv[1], 'rb').read()); "
        "SlurmBackend(state, logs, conf, job_path=path).resize(launch, 5)"
    )
    env = os.environ | {"TRAINYARD_CRASH_AT": "slurm-resize-before-sbatch"}
    killed = subprocess.run(
        [sys.executable, "-c", resize, str(arguments)], cwd=REPOSITORY, env=env, check=False
    )
    assert killed.returncode == -signal.SIGKILL
    # The old allocation still runs the job at 2 workers: nothing was lost.
    assert allocations(backend, "crash00001") == [("RUNNING", "node[1-2]")]
    cut_at = last_step(backend, "crash00001")

    # The next job manager's look at its jobs finishes the resize.
    report = backend.reports()["crash00001"]
    assert [w.state for w in report.workers] == [WorkerState.PENDING] * 3
    wait_until(lambda: reached(backend, "crash00001", 3, cut_at), RESIZE_SECONDS, "steps at 3")
    assert allocations(backend, "crash00001") == [("RUNNING", "node[1-3]")]
    taken = [s for s, _, _ in steps(backend, "crash00001")]
    # Resumed, never from step 0.
    assert taken == list(range(1, len(taken) + 1)), logs_of(backend, "crash00001")


def test_a_refused_new_allocation_fails_the_gang_and_its_retry_resumes(backend):
    launch = elastic(backend, "refuse0001", ("node1", "node2"))
    backend.deploy(launch)
    wait_until(lambda: reached(backend, "refuse0001", 2, 5), RESIZE_SECONDS, "5 steps at 2")

    # Five GPUs on a node of four: Slurm refuses the allocation.
    too_big = (*sized(("node1", "node2")), WorkerSpec(2, "node3", (0, 1, 2, 3, 4), 1000, 1024))
    with pytest.raises(DeployError, match="Slurm refused the new allocation"):
        backend.resize(replace(launch, workers=too_big), grace_seconds=GRACE_SECONDS)

    report = backend.reports()["refuse0001"]
    assert [w.state for w in report.workers] == [WorkerState.FAILED] * 3
    assert "Slurm refused" in report.workers[0].reason
    # The old allocation stops with its grace (its last step saved), then the job manager's
    # retry (a new attempt) resumes where it was.
    wait_until(lambda: not allocations(backend, "refuse0001"), RESIZE_SECONDS, "the old one ends")
    saved = last_step(backend, "refuse0001")
    backend.stop("refuse0001", 0)
    backend.deploy(replace(launch, attempt=2))
    wait_until(lambda: reached(backend, "refuse0001", 2, saved), RESIZE_SECONDS, "the retry runs")
    taken = [s for s, _, _ in steps(backend, "refuse0001")]
    assert taken == list(range(1, len(taken) + 1)), logs_of(backend, "refuse0001")
