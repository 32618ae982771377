"""Submitting jobs: defaults, validation rules, idempotency, durability of the answer."""

from __future__ import annotations

import pytest

from backend.jobs.models import Job, JobStatus
from tests.backend.jobs_support import JOBS, OMIT, submit
from tests.factories import GpuTypeFactory, NodeFactory

pytestmark = pytest.mark.django_db

WEEK = 7 * 24 * 3600


def test_submission_is_stored_with_t_shirt_defaults(world):
    response = submit(world.client(world.member), name="resnet", workers=2, gpus_per_worker=4)

    assert response.status_code == 201, response.json()
    answer = response.json()
    job = Job.objects.get(job_id=answer["id"])
    assert answer["status"] == "queued"
    assert (job.cpus_per_worker, job.memory_per_worker) == (32, 4 * 64 * 1024)
    assert job.max_wall_time == world.vision.max_wall_time
    assert job.max_retries == world.vision.default_max_retries
    assert [e.to_status for e in job.events.all()] == [JobStatus.QUEUED]


def test_submit_answers_the_job_as_stored(world):
    client = world.client(world.member)
    answer = submit(client, cpus_per_worker="2.5", env={"LR": "0.1"}).json()

    detail = client.get(f"{JOBS}{answer['id']}/").json()
    assert detail.pop("endpoints") == {}  # only running jobs can be reached
    assert detail == answer


def test_memory_quantity_is_answered_in_mib(world):
    response = submit(world.client(world.member), memory_per_worker="48Gi")

    assert response.status_code == 201, response.json()
    assert response.json()["memory_per_worker"] == 48 * 1024


# Each rule: what the member sends, the field the answer names, and words of its message.
INVALID_SUBMISSIONS = {
    "unknown gpu type": ({"gpu_type": "H900"}, "gpu_type", "Unknown GPU type 'H900'"),
    "gpu type omitted with several quotas": (
        {"gpu_type": OMIT},
        "gpu_type",
        "Name a GPU type; VC vision has quotas for: A100, cpu",
    ),
    "more gpus than the largest node": (
        {"gpus_per_worker": 9},
        "gpus_per_worker",
        "The largest A100 node has 8 GPUs",
    ),
    "more cpus than the largest node": (
        {"cpus_per_worker": 65},
        "cpus_per_worker",
        "the most is 64",
    ),
    "more memory than the largest node": (
        {"memory_per_worker": "600Gi"},
        "memory_per_worker",
        "the most is 524288 MiB",
    ),
    "more gpus than the vc quota": (
        {"workers": 3, "gpus_per_worker": 8},
        "gpus_per_worker",
        "needs 24 A100 GPUs in all; VC vision's quota is 16",
    ),
    "wall time above the vc max": (
        {"max_wall_time": WEEK + 1},
        "max_wall_time",
        f"allows at most 7 d ({WEEK} seconds); this job asks for 7 d 1 s ({WEEK + 1} seconds)",
    ),
    "far more cpus than any node": (
        {"gpus_per_worker": 1, "cpus_per_worker": 10000},
        "cpus_per_worker",
        "No A100 node with 1 GPU has 10000 CPUs; the most is 64 CPUs.",
    ),
    "interactive job above its gpu cap": (
        {"type": "interactive", "workers": 2, "gpus_per_worker": 8},
        "gpus_per_worker",
        "Interactive jobs in VC vision may hold at most 8 GPUs",
    ),
    "env not an object": ({"env": "LR=0.1"}, "env", "object of names to strings"),
    "env as a list": ({"env": ["LR=0.1"]}, "env", "object of names to strings"),
    "env bad name": ({"env": {"1LR": "0.1"}}, "env", "'1LR' is not a valid variable name"),
    "env name with a dash": ({"env": {"MY-VAR": "x"}}, "env", "not a valid variable name"),
    "env value not a string": ({"env": {"LR": 0.1}}, "env", "The value of LR must be a string"),
    "env reserved prefix": (
        {"env": {"TRAINYARD_JOB_ID": "x"}},
        "env",
        "TRAINYARD_JOB_ID is set by Trainyard",
    ),
    "env reserved name": ({"env": {"RANK": "0"}}, "env", "RANK is set by Trainyard"),
    "command empty": ({"command": ""}, "command", "may not be blank"),
    "command only blanks": ({"command": "   "}, "command", "Give the command to run"),
    "command unbalanced quotes": (
        {"command": "python -c 'print(1)"},
        "command",
        "not a well-formed shell command",
    ),
    "command with nul": ({"command": "python\x00 train.py"}, "command", "ull characters"),
    "memory in parsecs": (
        {"memory_per_worker": "12 parsecs"},
        "memory_per_worker",
        "'12 parsecs' is not a memory quantity",
    ),
    "memory negative": ({"memory_per_worker": -5}, "memory_per_worker", "positive"),
    "memory negative quantity": ({"memory_per_worker": "-4Gi"}, "memory_per_worker", "positive"),
    "image reference": (
        {"image": "Not An Image!"},
        "image",
        "is not a container image reference",
    ),
    "relative data path": ({"data_path": "data/train"}, "data_path", "Give an absolute path"),
    "relative working dir": ({"working_dir": "src"}, "working_dir", "Give an absolute path"),
    "output path with ..": (
        {"output_path": "/out/../etc"},
        "output_path",
        "may not contain '..'",
    ),
    "priority by a member": ({"priority": 5}, "priority", "Only a VC admin"),
    "priority out of range": ({"priority": 1000}, "priority", "less than or equal to 100"),
    "cpu-only type with gpus": (
        {"gpu_type": "cpu", "gpus_per_worker": 1},
        "gpus_per_worker",
        "CPU-only nodes have no GPUs",
    ),
    "zero gpus on a gpu type": (
        {"gpus_per_worker": 0},
        "gpus_per_worker",
        "Ask for at least 1 GPU, or use gpu_type 'cpu'",
    ),
    "workers as a string": ({"workers": "two"}, "workers", "valid integer"),
    "workers zero": ({"workers": 0}, "workers", "greater than or equal to 1"),
    "vc as a list": ({"vc": ["vision"]}, "vc", "Not a valid string"),
    "preemptible not a boolean": ({"preemptible": "maybe"}, "preemptible", "valid boolean"),
    "wall time too short": ({"max_wall_time": 10}, "max_wall_time", "At least 60 seconds"),
    "ports not a list": ({"ports": "8888"}, "ports", "Expected a list"),
    "a port twice": (
        {"ports": [{"name": "a", "port": 8888}, {"name": "b", "port": 8888}]},
        "ports",
        "Each port and each name once",
    ),
    "too many ports": (
        {"ports": [{"name": f"p{n}", "port": 9000 + n} for n in range(9)]},
        "ports",
        "At most 8 ports",
    ),
}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    INVALID_SUBMISSIONS.values(),
    ids=INVALID_SUBMISSIONS.keys(),
)
def test_invalid_submission_names_the_field(world, fields, field, message):
    response = submit(world.client(world.member), **fields)

    assert response.status_code == 400, response.content
    assert message in " ".join(response.json()[field])
    assert not Job.objects.exists()


def test_every_mistake_of_a_submission_is_named_in_one_answer(world):
    response = submit(
        world.client(world.member),
        workers=0,  # each field's own rule
        env={"1LR": "0.1"},
        command="",
        gpus_per_worker=16,  # and the rules across fields, on the fields that passed
        max_wall_time=WEEK + 1,
        priority=5,
        node_selector={"zone": "mars"},
    )

    assert response.status_code == 400, response.content
    errors = response.json()
    assert sorted(errors) == [
        "command", "env", "gpus_per_worker", "max_wall_time", "node_selector", "priority",
        "workers",
    ]  # fmt: skip
    assert errors["gpus_per_worker"] == [
        "The largest A100 node has 8 GPUs; a worker asks for 16. Use more workers with fewer "
        "GPUs each."
    ]
    assert "allows at most 7 d" in errors["max_wall_time"][0]
    assert not Job.objects.exists()


def test_an_interactive_job_gets_the_vcs_interactive_wall_time_not_its_maximum(world):
    client = world.client(world.member)

    shell = submit(client, type="interactive", command="exec sleep infinity").json()
    batch = submit(client, command="python train.py").json()

    assert (shell["max_wall_time"], batch["max_wall_time"]) == (8 * 3600, WEEK)
    world.vision.interactive_wall_time = 2 * 3600
    world.vision.max_wall_time = 3600  # the VC's maximum caps it
    world.vision.save()
    capped = submit(client, type="interactive", command="exec sleep infinity").json()
    assert capped["max_wall_time"] == 3600


def test_vc_of_another_tenant_is_answered_as_unknown(world):
    client = world.client(world.member)

    foreign = submit(client, vc="nlp").json()
    unknown = submit(client, vc="nowhere").json()

    assert foreign == {"vc": ["No virtual cluster named 'nlp' of yours."]}
    assert unknown == {"vc": ["No virtual cluster named 'nowhere' of yours."]}


def test_gpu_type_defaults_to_the_vcs_only_quota(world):
    response = submit(world.client(world.outsider), vc="nlp", gpu_type=OMIT)

    assert response.status_code == 201, response.json()
    assert response.json()["gpu_type"] == "A100"


def test_over_quota_job_is_accepted_as_preemptible(world):
    response = submit(world.client(world.member), workers=3, gpus_per_worker=8, preemptible=True)

    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "queued"


def test_gpu_type_without_quota_must_be_preemptible(world):
    h100 = GpuTypeFactory(name="H100")
    NodeFactory(gpu_type=h100)
    client = world.client(world.member)

    refused = submit(client, gpu_type="H100")
    accepted = submit(client, gpu_type="H100", preemptible=True)

    assert refused.status_code == 400
    assert refused.json()["gpu_type"] == [
        "VC vision has no H100 quota. Submit it as preemptible to borrow idle capacity."
    ]
    assert accepted.status_code == 201, accepted.json()


def test_gpu_type_without_nodes_is_refused(world):
    GpuTypeFactory(name="H100")

    response = submit(world.client(world.member), gpu_type="H100", preemptible=True)

    assert response.status_code == 400
    assert response.json()["gpu_type"] == ["No H100 nodes are registered in the cluster."]


def test_vc_admin_may_set_a_priority(world):
    response = submit(world.client(world.vc_admin), priority=5)

    assert response.status_code == 201, response.json()
    assert response.json()["priority"] == 5


def test_cluster_admin_may_submit_into_any_vc(world):
    response = submit(world.client(world.staff), vc="nlp")

    assert response.status_code == 201, response.json()
    assert (response.json()["vc"], response.json()["owner"]) == ("nlp", "root")


def test_cpu_only_job_gets_no_gpus(world):
    response = submit(world.client(world.member), gpu_type="cpu")

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["gpus_per_worker"], answer["cpus_per_worker"]) == (0, 2)


def test_absurd_memory_is_refused_not_a_server_error(world):
    response = submit(world.client(world.member), memory_per_worker="1e30")

    assert response.status_code == 400
    assert "memory_per_worker" in response.json()


def test_malformed_json_is_a_bad_request(world):
    response = world.client(world.member).post(
        JOBS, '{"vc": "vision", ', content_type="application/json"
    )

    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


@pytest.mark.parametrize("body", [["vision"], "vision", 42], ids=["list", "string", "number"])
def test_body_that_is_not_an_object_is_a_bad_request(world, body):
    response = world.client(world.member).post(JOBS, body, format="json")

    assert response.status_code == 400
    assert "Expected a dictionary" in response.json()["non_field_errors"][0]


def test_missing_command_is_named(world):
    response = submit(world.client(world.member), command=OMIT)

    assert response.status_code == 400
    assert response.json()["command"] == ["This field is required."]


def test_anonymous_cannot_submit(world, anonymous):
    response = submit(anonymous)

    assert response.status_code == 401
    assert not Job.objects.exists()


def test_a_submission_costs_a_few_queries_however_many_jobs_exist(
    world, django_assert_max_num_queries
):
    # The VC, its quota (with the GPU type and whether a node fits a worker), the owner's
    # Unix account; the job and its event, in one savepoint here (a transaction live).
    client = world.client(world.member)
    for _ in range(3):
        assert submit(client, gpus_per_worker=1).status_code == 201

    with django_assert_max_num_queries(7):
        response = submit(client, gpus_per_worker=1)

    assert response.status_code == 201
    assert response.json()["status"] == "queued"
    assert response.json()["array"] is None


def test_an_array_of_a_hundred_costs_the_queries_of_a_few_jobs(
    world, django_assert_max_num_queries
):
    client = world.client(world.member)
    with django_assert_max_num_queries(13):
        response = submit(client, gpus_per_worker=1, array={"count": 100})

    assert response.status_code == 201
    assert Job.objects.filter(array__array_id=response.json()["array"]).count() == 100


# --- Idempotency-Key -----------------------------------------------------------------------


def test_same_idempotency_key_returns_the_first_job(world):
    client = world.client(world.member)
    key = {"Idempotency-Key": "run-42"}

    first = submit(client, headers=key)
    second = submit(client, headers=key)

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] == second.json()["id"]
    assert "Idempotent-Replayed" not in first.headers
    assert second.headers["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1


def test_idempotency_key_is_per_user(world):
    key = {"Idempotency-Key": "run-42"}

    mine = submit(world.client(world.member), headers=key)
    theirs = submit(world.client(world.vc_admin), headers=key)

    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]
    assert "Idempotent-Replayed" not in theirs.headers
    assert Job.objects.count() == 2


def test_different_idempotency_keys_make_different_jobs(world):
    client = world.client(world.member)

    submit(client, headers={"Idempotency-Key": "a"})
    submit(client, headers={"Idempotency-Key": "b"})

    assert Job.objects.count() == 2


def test_over_long_idempotency_key_is_refused(world):
    response = submit(world.client(world.member), headers={"Idempotency-Key": "k" * 201})

    assert response.status_code == 400
    assert response.json() == {"Idempotency-Key": ["At most 200 characters."]}
    assert not Job.objects.exists()


# --- Per-user GPU limit --------------------------------------------------------------------


@pytest.fixture
def limited(world):
    """VC vision lets one member hold 8 non-preemptible GPUs before a VC admin approves."""
    world.vision.user_gpu_limit = 8
    world.vision.save()
    return world


def test_job_past_the_user_gpu_limit_waits_for_approval(limited):
    client = limited.client(limited.member)
    assert submit(client, gpus_per_worker=8).json()["status"] == "queued"  # up to the limit

    response = submit(client, gpus_per_worker=2)

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert answer["status"] == "unapproved"
    assert "per-user limit of 8" in answer["status_message"]
    assert "10 non-preemptible GPUs" in answer["status_message"]


def test_preemptible_job_is_not_held_by_the_user_gpu_limit(limited):
    client = limited.client(limited.member)
    submit(client, gpus_per_worker=8)

    response = submit(client, gpus_per_worker=2, preemptible=True)

    assert response.json()["status"] == "queued"


def test_vc_admin_is_not_held_by_the_user_gpu_limit(limited):
    response = submit(limited.client(limited.vc_admin), workers=2, gpus_per_worker=8)

    assert response.json()["status"] == "queued"


def test_vc_admin_approves_a_held_job(limited):
    job_id = submit(limited.client(limited.member), workers=2, gpus_per_worker=8).json()["id"]
    admin = limited.client(limited.vc_admin)

    response = admin.post(f"{JOBS}{job_id}/approve/", {"reason": "deadline"}, format="json")

    assert response.status_code == 200, response.json()
    assert (response.json()["status"], response.json()["status_message"]) == ("queued", "")
    last_event = admin.get(f"{JOBS}{job_id}/events/").json()[-1]
    assert last_event | {"created_at": None} == {
        "from_status": "unapproved",
        "to_status": "queued",
        "actor": "vera",
        "reason": "deadline",
        "created_at": None,
    }


def test_member_cannot_approve_their_own_job(limited):
    client = limited.client(limited.member)
    job_id = submit(client, workers=2, gpus_per_worker=8).json()["id"]

    response = client.post(f"{JOBS}{job_id}/approve/")

    assert response.status_code == 403
    assert response.json()["detail"] == "Only an admin of VC vision can approve jobs."
    assert Job.objects.get(job_id=job_id).status == JobStatus.UNAPPROVED


def test_approving_a_queued_job_is_a_conflict(limited):
    job_id = submit(limited.client(limited.member)).json()["id"]

    response = limited.client(limited.vc_admin).post(f"{JOBS}{job_id}/approve/")

    assert response.status_code == 409
    assert "needs no approval" in response.json()["detail"]


def test_exposed_ports_are_stored_and_answered(world):
    ports = [{"name": "jupyter", "port": 8888}, {"name": "tensorboard", "port": 6006}]

    response = submit(world.client(world.member), ports=ports)

    assert response.status_code == 201, response.json()
    assert response.json()["ports"] == ports
    assert Job.objects.get().ports == ports


@pytest.mark.parametrize(
    ("port", "errors"),
    [
        ({"name": "Jupyter Lab", "port": 8888}, {"name": ["Lowercase letters, digits"]}),
        ({"name": "jupyter", "port": 22}, {"port": ["greater than or equal to 1024"]}),
        ({"name": "jupyter"}, {"port": ["This field is required."]}),
    ],
)
def test_a_bad_exposed_port_names_its_field(world, port, errors):
    response = submit(world.client(world.member), ports=[port])

    assert response.status_code == 400
    answered = response.json()["ports"]["0"]  # the first port's errors
    for field, (message,) in errors.items():
        assert message in answered[field][0]
