"""An elastic job on the running system: the job manager in this process, the local
backend's runc containers, real PyTorch on the CPU (examples/train_elastic.py). A
2..4-worker job starts on the 4 free GPUs (2 workers), grows to 4 workers when another
job ends, shrinks to 2 when a guaranteed job of its VC arrives (which starts at once),
and its loss keeps going down across both resizes, never restarting from step 0."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from backend.clusters.models import Node
from backend.jobs.models import Job, JobStatus
from tests.backend.local_support import JobManager, backend, jobs, submit  # noqa: F401 (fixtures)
from tests.jobmanager.test_local_elastic import SCRIPT, TRAINING_ENV, steps
from tests.polling import wait_until
from tests.unix_accounts import readable_script

pytestmark = [pytest.mark.django_db, pytest.mark.integration]
RESIZE_SECONDS = 180
TRAINING_PATH = f"{TRAINING_ENV}/bin:/usr/bin:/bin"


def workers_of(job: Job) -> int:
    job.refresh_from_db()
    return job.workers


def test_an_elastic_job_grows_when_a_job_ends_and_shrinks_for_a_guaranteed_one(
    world,
    jobs,  # noqa: F811 (the fixture)
    host_tmp: Path,
    settings,
):
    if not (TRAINING_ENV / "bin" / "torchrun").exists():
        pytest.skip("no training environment with torchrun here (make training-env)")
    settings.TRAINYARD_ELASTIC_MIN_INTERVAL_SECONDS = 0
    # The product's grace for a resize's stop: a SIGKILL past the tests' 2 s on loaded
    # cores fell between a step's checkpoint and its log line (step 13 lost in CI).
    settings.TRAINYARD_STOP_GRACE_SECONDS = 30
    Node.objects.exclude(name="a100-1").update(schedulable=False)  # 8 GPUs in all
    script = readable_script(host_tmp, "train_elastic.py", SCRIPT.read_text())
    release = host_tmp / "release"
    other = submit(world, gpus_per_worker=4, command=f"until [ -e {release} ]; do sleep 0.2; done")
    jobs.run_until(other, JobStatus.RUNNING)
    elastic = submit(
        world,
        workers=2, min_workers=2, max_workers=4, gpus_per_worker=2,
        command=f"python {script} --steps 100000 --step-seconds 0.05 --lr 0.001",
        env={"PATH": TRAINING_PATH},
    )  # fmt: skip
    elastic = jobs.run_until(elastic, JobStatus.RUNNING)
    assert elastic.workers == 2
    started = wait_until(lambda: steps(jobs.backend, elastic.job_id), RESIZE_SECONDS, "training")
    assert started[0][:2] == (1, 2)

    release.touch()  # the other job ends
    wait_until(lambda: jobs.run() and workers_of(elastic) == 4, RESIZE_SECONDS, "the grow")
    assert elastic.events.last().reason == "resized from 2 to 4 workers: GPUs free"
    grown_at = max(step for step, world_size, _ in steps(jobs.backend, elastic.job_id))
    wait_until(
        lambda: any(w == 4 for _, w, _ in steps(jobs.backend, elastic.job_id)),
        RESIZE_SECONDS,
        "steps at 4 workers",
    )

    guaranteed = submit(world, gpus_per_worker=4, command="sleep 600")
    guaranteed = jobs.run_until(guaranteed, JobStatus.RUNNING)
    elastic.refresh_from_db()
    assert (elastic.workers, elastic.resizes, elastic.status) == (2, 2, JobStatus.RUNNING)
    assert elastic.events.last().reason == (
        f"shrunk from 4 to 2 workers: guaranteed job {guaranteed.job_id} of VC vision "
        "needed its GPUs"
    )
    shrunk_at = max(step for step, _, _ in steps(jobs.backend, elastic.job_id))
    wait_until(
        lambda: any(s > shrunk_at and w == 2 for s, w, _ in steps(jobs.backend, elastic.job_id)),
        RESIZE_SECONDS,
        "steps at 2 workers again",
    )

    taken = steps(jobs.backend, elastic.job_id)
    assert [s for s, _, _ in taken] == list(range(1, len(taken) + 1)), "never from step 0"
    losses = [loss for _, _, loss in taken]
    assert all(later <= earlier for earlier, later in itertools.pairwise(losses))
    assert losses[-1] < losses[shrunk_at - 1] < losses[grown_at - 1] < losses[0]
    assert list(elastic.attempts.values_list("number", flat=True)) == [1]
