"""The live job manager: gunicorn, real Celery worker processes, Redis and the database.

The memory backend keeps its table in a file that the web, the workers and this test
share, so the test can see what was deployed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from backend.jobs.models import Job, JobStatus
from jobmanager.backends.memory import MemoryBackend
from tests.backend.live_support import (
    LiveSystem,
    ffdl_cluster,  # noqa: F401 (fixtures)
    live_env,
    start_beat,
    start_worker,
)
from tests.polling import wait_until
from tests.servers import ROOT, kill_process_group, start_gunicorn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


@pytest.fixture
def live_system(ffdl_cluster, tmp_path, redis_url):  # noqa: F811 (the fixture)
    """Web (2 gunicorn workers), two Celery workers and beat (the job manager every second)."""
    env = live_env(tmp_path, redis_url) | {"TRAINYARD_JOB_MANAGER_INTERVAL": "1"}
    web, base_url = start_gunicorn(extra_env=env, workers=2)
    others = [start_worker(env, "jm1"), start_worker(env, "jm2"), start_beat(env, tmp_path)]
    try:
        backend = MemoryBackend(state_path=env["TRAINYARD_MEMORY_BACKEND_STATE"])
        yield LiveSystem(base_url, ffdl_cluster, backend, env)
    finally:
        for process in (web, *others):
            kill_process_group(process)


def status_counts(ids: list[str]) -> Counter:
    return Counter(Job.objects.filter(job_id__in=ids).values_list("status", flat=True))


def gpus_held(running) -> Counter:
    """How many running jobs hold each (node, GPU)."""
    return Counter(
        (worker["node"], gpu)
        for job in running
        for worker in job.placement
        for gpu in worker["gpus"]
    )


def assert_no_gpu_is_double_booked_or_idle(ids: list[str], backend: MemoryBackend) -> None:
    running = Job.objects.filter(job_id__in=ids, status=JobStatus.RUNNING)
    held = gpus_held(running)
    assert all(count == 1 for count in held.values()), "a GPU is held twice"
    deployed = backend.deployed()
    assert set(deployed) == {job.job_id for job in running}
    # Every placed job runs all of its workers: no GPU is allocated and idle.
    assert all(len(deployed[job.job_id]["workers"]) == job.workers == 2 for job in running)
    assert not Job.objects.filter(job_id__in=ids, status=JobStatus.SCHEDULING).exists()


def test_ffdl_50_two_worker_jobs_on_15_four_gpu_nodes_30_run_and_20_wait(live_system):
    """FfDL's gang-scheduling scenario, three times over: 50 jobs of 2 x 1 GPU submitted
    at once on 15 x 4 GPUs. All 60 GPUs are used by 30 complete gangs; 20 jobs wait."""
    body = {"vc": "ffdl", "command": "python train.py", "workers": 2, "gpus_per_worker": 1}
    for round_number in range(3):
        with ThreadPoolExecutor(max_workers=16) as pool:
            ids = list(pool.map(lambda _: live_system.submit(body), range(50)))

        wait_until(
            lambda ids=ids: status_counts(ids) == Counter({"running": 30, "queued": 20}),
            60,
            f"30 running and 20 queued jobs (round {round_number + 1})",
        )
        assert_no_gpu_is_double_booked_or_idle(ids, live_system.backend)
        waiting = Job.objects.filter(job_id__in=ids, status=JobStatus.QUEUED)
        assert all(
            "largest free block is 0" in job.insight_message
            for job in waiting
            if job.insight_message
        )

        live_system.batch("kill", ids)
        wait_until(
            lambda ids=ids: status_counts(ids) == Counter({"killed": 50}),
            60,
            "every job to be killed",
        )
        # The backend lets go of a job just after the transaction that records it killed.
        wait_until(lambda: live_system.backend.deployed() == {}, 10, "the backend to let go")


def test_a_finished_job_makes_room_for_a_waiting_one(live_system):
    body = {"vc": "ffdl", "command": "python train.py", "workers": 15, "gpus_per_worker": 4}
    first, second = live_system.submit(body), live_system.submit(body)
    wait_until(lambda: status_counts([first]) == Counter({"running": 1}), 60, "the first to run")
    assert status_counts([second]) == Counter({"queued": 1})

    live_system.backend.finish(first, exit_code=0)  # nothing else happens: beat notices

    wait_until(
        lambda: status_counts([first, second]) == Counter({"finished": 1, "running": 1}),
        60,
        "the first job to finish and the second to run",
    )


def test_racing_job_managers_never_start_a_job_twice_or_overcommit_a_node(
    ffdl_cluster,  # noqa: F811 (the fixture)
    tmp_path,
    redis_url,
):
    env = live_env(tmp_path, redis_url) | {"TRAINYARD_TRIGGER_JOB_MANAGER": "false"}
    web, base_url = start_gunicorn(extra_env=env)
    backend = MemoryBackend(state_path=env["TRAINYARD_MEMORY_BACKEND_STATE"])
    system = LiveSystem(base_url, ffdl_cluster, backend, env)
    try:
        shapes = [(1, 1), (2, 1), (1, 4), (2, 4), (1, 2), (3, 2)] * 8
        ids = [
            system.submit({"vc": "ffdl", "command": "true", "workers": w, "gpus_per_worker": g})
            for w, g in shapes
        ]
    finally:
        kill_process_group(web)

    racers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "run_job_manager", "--runs", "5"],
            cwd=ROOT,
            env=os.environ | env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [racer.communicate(timeout=120)[0] for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), outputs

    deploys = backend.deploy_calls()
    assert deploys and len(deploys) == len(set(deploys)), "an attempt was deployed twice"
    assert all(attempt == 1 for _, attempt in deploys), "a job was started twice"
    running = Job.objects.filter(job_id__in=ids, status=JobStatus.RUNNING)
    held = gpus_held(running)
    assert 0 < sum(held.values()) <= 60
    assert all(count == 1 for count in held.values()), "a GPU is held twice"
