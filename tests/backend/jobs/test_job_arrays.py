"""Job arrays: one submission, many jobs sharing a spec, each with its index; listed,
killed, paused and resumed as one; each task counted against limits as a single job."""

from __future__ import annotations

import pytest

from backend.jobs.models import Job, JobEvent, JobStatus
from jobmanager.backends.memory import MemoryBackend
from tests.backend.jobs_support import JOBS, JobManager, submit

pytestmark = pytest.mark.django_db
ARRAYS = "/api/v1/job-arrays/"


@pytest.fixture
def backend(tmp_path, settings) -> MemoryBackend:
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    return MemoryBackend(log_dir=settings.TRAINYARD_LOG_DIR)


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


def submit_array(client, array: dict, **fields) -> dict:
    response = submit(client, **({"gpus_per_worker": 1, "array": array} | fields))
    assert response.status_code == 201, response.json()
    return response.json()


def test_an_array_is_its_jobs_each_with_a_distinct_index(world, jobs, backend):
    answer = submit_array(world.client(world.member), {"count": 5}, env={"LR": "0.1"})

    assert answer["size"] == 5 and len(set(answer["jobs"])) == 5
    stored = Job.objects.filter(array__array_id=answer["array"]).order_by("array_index")
    assert [job.job_id for job in stored] == answer["jobs"]
    assert [job.array_index for job in stored] == [0, 1, 2, 3, 4]
    assert {job.status for job in stored} == {JobStatus.QUEUED}
    assert JobEvent.objects.filter(job__in=stored, to_status=JobStatus.QUEUED).count() == 5

    jobs.run()

    envs = [backend.deployed()[job_id]["env"] for job_id in answer["jobs"]]
    assert [env["TRAINYARD_ARRAY_INDEX"] for env in envs] == ["0", "1", "2", "3", "4"]
    assert {env["LR"] for env in envs} == {"0.1"}
    assert {env["TRAINYARD_ARRAY_ID"] for env in envs} == {answer["array"]}


def test_a_sweep_lays_each_tasks_environment_over_the_spec(world, jobs, backend):
    tasks = [{"LR": "0.1"}, {"LR": "0.01", "SEED": "2"}]
    answer = submit_array(world.client(world.member), {"tasks": tasks}, env={"SEED": "1"})

    jobs.run()

    envs = [backend.deployed()[job_id]["env"] for job_id in answer["jobs"]]
    assert [(env["LR"], env["SEED"], env["TRAINYARD_ARRAY_INDEX"]) for env in envs] == [
        ("0.1", "1", "0"),
        ("0.01", "2", "1"),
    ]


@pytest.mark.parametrize(
    ("array", "field", "words"),
    [
        ({}, "count", 'Give either "count" or "tasks"'),
        ({"count": 2, "tasks": [{}]}, "count", 'Give either "count" or "tasks"'),
        ({"count": 0}, "count", "greater than or equal to 1"),
        ({"count": 10_001}, "count", "less than or equal to 10000"),
        ({"tasks": [{"LR": "1"}, {"TRAINYARD_X": "1"}]}, "tasks", "set by Trainyard"),
        ({"tasks": [{"LR": 1}]}, "tasks", "must be a string"),
    ],
)
def test_a_bad_array_is_refused_naming_its_field(world, array, field, words):
    response = submit(world.client(world.member), array=array)

    assert response.status_code == 400
    assert words in str(response.json()["array"][field])
    assert not Job.objects.exists()


def test_the_arrays_jobs_are_listed_by_its_id_and_counted(world):
    client = world.client(world.member)
    answer = submit_array(client, {"count": 3})
    submit_array(client, {"count": 2})

    listed = client.get(f"{JOBS}?array={answer['array']}").json()
    assert sorted(job["id"] for job in listed["results"]) == sorted(answer["jobs"])
    assert {job["array"] for job in listed["results"]} == {answer["array"]}
    detail = client.get(f"{ARRAYS}{answer['array']}/").json()
    assert (detail["size"], detail["counts"]) == (3, {"queued": 3})
    assert len(client.get(ARRAYS).json()["results"]) == 2


def test_another_tenant_cannot_see_or_kill_an_array(world):
    answer = submit_array(world.client(world.member), {"count": 2})
    outsider = world.client(world.outsider)

    assert outsider.get(f"{ARRAYS}{answer['array']}/").status_code == 404
    assert outsider.post(f"{ARRAYS}{answer['array']}/kill/", {}).status_code == 404
    assert outsider.get(f"{JOBS}?array={answer['array']}").json()["results"] == []
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.QUEUED}


def test_an_array_is_killed_as_one_running_and_waiting_tasks_alike(world, jobs, backend):
    client = world.client(world.member)
    submit_array(client, {"count": 1}, gpus_per_worker=8)  # another array, left alone
    answer = submit_array(client, {"count": 4}, gpus_per_worker=8)  # 3 fit beside it
    jobs.run()
    tasks = Job.objects.filter(array__array_id=answer["array"])
    assert sorted(job.status for job in tasks) == [JobStatus.QUEUED] + [JobStatus.RUNNING] * 3

    response = client.post(f"{ARRAYS}{answer['array']}/kill/", {"reason": "wrong data"})

    assert response.json() == {"array": answer["array"], "action": "kill", "changed": 4}
    assert sorted(job.status for job in tasks.all()) == [JobStatus.KILLED] + [JobStatus.KILLING] * 3
    jobs.run()  # the memory backend stops at once
    assert [job.status for job in tasks.all()] == [JobStatus.KILLED] * 4
    assert {job.status_message for job in tasks.all()} == {"wrong data"}
    assert list(backend.deployed()) == list(  # the other array's task still runs
        Job.objects.exclude(array__array_id=answer["array"]).values_list("job_id", flat=True)
    )


def test_an_array_is_paused_and_resumed_as_one(world, jobs, backend):
    client = world.client(world.member)
    answer = submit_array(client, {"count": 3})

    assert client.post(f"{ARRAYS}{answer['array']}/pause/", {}).json()["changed"] == 3
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.PAUSED}
    assert client.post(f"{ARRAYS}{answer['array']}/resume/", {}).json()["changed"] == 3
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.QUEUED}


def test_tasks_count_against_the_vc_quota_as_single_jobs_do(world, jobs):
    world.vision.quotas.filter(gpu_type=world.a100).update(gpus=2)
    answer = submit_array(world.client(world.member), {"count": 5})

    jobs.run()

    tasks = Job.objects.filter(job_id__in=answer["jobs"]).order_by("array_index")
    assert {job.status for job in tasks} == {JobStatus.RUNNING}  # on an idle cluster
    # Two within the quota; the others beyond it, on idle GPUs, preemptible.
    assert sorted(job.borrowing for job in tasks) == [False, False, True, True, True]


def test_tasks_past_the_per_user_gpu_limit_wait_for_approval(world):
    world.vision.user_gpu_limit = 3
    world.vision.save()
    client = world.client(world.member)
    submit(client, gpus_per_worker=1)  # one GPU held before

    answer = submit_array(client, {"count": 4})

    statuses = [Job.objects.get(job_id=job_id).status for job_id in answer["jobs"]]
    assert statuses == [JobStatus.QUEUED] * 2 + [JobStatus.UNAPPROVED] * 2
    waiting = Job.objects.get(job_id=answer["jobs"][2])
    assert "per-user limit of 3" in waiting.status_message


def test_an_array_of_ten_thousand_tasks_is_accepted_whole(world):
    # How fast is bench.throughput.accept's to measure (goal: under 2 s).
    answer = submit_array(world.client(world.member), {"count": 10_000})

    assert len(set(answer["jobs"])) == 10_000
    stored = Job.objects.filter(array__array_id=answer["array"])
    assert sorted(stored.values_list("array_index", flat=True)) == list(range(10_000))
