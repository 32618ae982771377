"""What the dashboard shows around a submission: will it start now, the VC's queue in
order, every VC's use, and how to reach a running job."""

from __future__ import annotations

import pytest

from backend.accounts.host_key import load_host_key
from backend.jobs.models import Job, JobStatus
from backend.jobs.snapshot import load_snapshot
from jobmanager.core import schedule
from tests.backend.jobs_support import JOBS, make_job, submit
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

PREVIEW = f"{JOBS}preview/"
GIB = 1024


def fill(world, node: str, gpus: int, vc=None) -> Job:
    """A running job holding `gpus` GPUs of `node`."""
    placement = [{"node": node, "gpus": list(range(gpus)), "cpus": 8 * gpus, "memory": gpus}]
    return make_job(
        world, status=JobStatus.RUNNING, vc=vc or world.vision, gpus_per_worker=gpus,
        cpus_per_worker=8 * gpus, memory_per_worker=gpus, placement=placement,
    )  # fmt: skip


def preview(client, **fields):
    body = {"vc": "vision", "command": "python train.py", "gpu_type": "A100"} | fields
    return client.post(PREVIEW, body, format="json")


def test_a_job_that_fits_now_can_start_and_nothing_is_stored(world):
    response = preview(world.client(world.member), workers=2, gpus_per_worker=8)

    assert response.status_code == 200, response.json()
    assert response.json() == {"can_start_now": True, "reason": None, "estimated_start_at": None}
    assert not Job.objects.exists()


def test_a_job_that_must_wait_says_why_as_the_scheduler_will(world):
    for node, vc in (("a100-1", world.vision), ("a100-2", world.vision), ("a100-3", world.nlp)):
        fill(world, node, 5, vc=vc)
    fill(world, "a100-4", 5, vc=world.nlp)  # 3 GPUs free on every node
    client = world.client(world.member)

    answer = preview(client, workers=2, gpus_per_worker=4).json()

    assert answer["can_start_now"] is False
    assert answer["estimated_start_at"] is not None  # once the running jobs reach their limit
    # Submitted, the job waits for exactly the reason the preview gave.
    job_id = submit(client, workers=2, gpus_per_worker=4).json()["id"]
    waits = {wait.job_id: wait.reason for wait in schedule(load_snapshot()).waits}
    assert answer["reason"] == waits[job_id]
    assert "2 x 4" in answer["reason"]


def test_work_beyond_the_quota_starts_as_borrowed_preemptible_work(world):
    answer = preview(
        world.client(world.outsider), vc="nlp", workers=2, gpus_per_worker=8, preemptible=True
    ).json()

    assert answer["can_start_now"] is True
    assert "borrowing" in answer["reason"]


def test_a_job_over_the_per_user_limit_would_wait_for_approval(world):
    world.vision.user_gpu_limit = 4
    world.vision.save()

    answer = preview(world.client(world.member), gpus_per_worker=8).json()

    assert answer["can_start_now"] is False
    assert "approval" in answer["reason"]


def test_a_preview_rejects_what_a_submission_rejects_with_the_same_field_errors(world):
    client = world.client(world.member)
    bad = {"workers": 0, "gpu_type": "H100"}

    answer = preview(client, **bad)

    assert answer.status_code == 400
    assert answer.json() == submit(client, **bad).json()
    assert set(answer.json()) >= {"workers"}


def test_a_preview_into_another_tenants_vc_is_refused(world):
    response = preview(world.client(world.outsider), vc="vision")

    assert response.status_code == 400
    assert "vc" in response.json()


def test_the_queue_is_in_the_order_the_scheduler_takes_it(world):
    late = make_job(world, name="late", priority=0)
    urgent = make_job(world, name="urgent", priority=50)
    early = JobFactory(
        owner=world.vc_admin, vc=world.vision, gpu_type=world.a100, name="early",
        queued_at=late.queued_at.replace(year=late.queued_at.year - 1),
    )  # fmt: skip
    make_job(world, name="elsewhere", vc=world.nlp)
    make_job(world, name="running", status=JobStatus.RUNNING)

    queue = world.client(world.member).get("/api/v1/vcs/vision/queue/").json()

    assert [(row["position"], row["name"]) for row in queue] == [
        (1, "urgent"),
        (2, "early"),
        (3, "late"),
    ]
    assert queue[1]["owner"] == world.vc_admin.username
    assert (queue[0]["job_id"], queue[2]["job_id"]) == (urgent.job_id, late.job_id)
    assert early.job_id == queue[1]["job_id"]


def test_another_tenants_queue_is_not_found(world):
    assert world.client(world.outsider).get("/api/v1/vcs/vision/queue/").status_code == 404


def test_every_vc_use_is_shown_as_aggregates(world):
    fill(world, "a100-1", 4)
    fill(world, "a100-2", 8, vc=world.nlp)
    make_job(world, gpus_per_worker=2, workers=3)

    rows = world.client(world.outsider).get("/api/v1/cluster/vc-usage/").json()["vcs"]

    assert rows == [
        {"vc": "nlp", "gpu_type": "A100", "quota_gpus": 8, "used_gpus": 8, "queued_gpus": 0},
        {"vc": "vision", "gpu_type": "A100", "quota_gpus": 16, "used_gpus": 4, "queued_gpus": 6},
        {"vc": "vision", "gpu_type": "cpu", "quota_gpus": 0, "used_gpus": 0, "queued_gpus": 0},
    ]


def test_a_running_job_shows_how_to_reach_it_and_a_queued_one_does_not(world, settings, tmp_path):
    settings.TRAINYARD_SSH_GATEWAY = "ssh.trainyard.example"
    settings.TRAINYARD_SSH_PORT = 2222
    settings.TRAINYARD_SSH_HOST_KEY = tmp_path / "host_key"
    fingerprint = load_host_key(settings.TRAINYARD_SSH_HOST_KEY).get_fingerprint("sha256")
    running = make_job(
        world,
        status=JobStatus.RUNNING,
        working_dir="/home/mia/run",
        ports=[{"name": "jupyter", "port": 8888}],
    )
    queued = make_job(world)
    client = world.client(world.vc_admin)  # the owner's login, whoever looks

    endpoints = client.get(f"{JOBS}{running.job_id}/").json()["endpoints"]

    login = f"mia+{running.job_id}"
    assert endpoints == {
        "ssh": f"ssh -p 2222 {login}@ssh.trainyard.example",
        "ssh_config": (
            f"Host trainyard-{running.job_id}\n  HostName ssh.trainyard.example\n"
            f"  Port 2222\n  User {login}\n"
        ),
        "vscode": f"vscode://vscode-remote/ssh-remote+{login}@ssh.trainyard.example:2222/home/mia/run",
        "host_key_fingerprint": fingerprint,
        "ports": [
            {
                "name": "jupyter",
                "port": 8888,
                "url": f"http://testserver/endpoints/{running.job_id}/jupyter/",
            }
        ],
    }
    assert fingerprint.startswith("SHA256:")
    assert client.get(f"{JOBS}{queued.job_id}/").json()["endpoints"] == {}


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_vs_code_opens_the_job_s_own_directory_when_it_names_none(
    world, settings, tmp_path, backend
):
    settings.TRAINYARD_BACKEND = backend
    settings.TRAINYARD_LOCAL_STATE_DIR = settings.TRAINYARD_SLURM_STATE_DIR = tmp_path / "jobs"
    settings.TRAINYARD_SSH_HOST_KEY = tmp_path / "host_key"
    job = make_job(world, status=JobStatus.RUNNING)

    endpoints = world.client(world.member).get(f"{JOBS}{job.job_id}/").json()["endpoints"]

    assert endpoints["vscode"].endswith(
        f"@{settings.TRAINYARD_SSH_GATEWAY}:2222{tmp_path}/jobs/{job.job_id}/work"
    )


def test_the_owner_exposes_a_port_of_a_running_job_later(world):
    job = make_job(world, status=JobStatus.RUNNING, ports=[{"name": "jupyter", "port": 8888}])
    url = f"{JOBS}{job.job_id}/ports/"

    exposed = world.client(world.member).post(url, {"name": "tensorboard", "port": 6006})
    taken = world.client(world.member).post(url, {"name": "jupyter", "port": 9999})
    bad = world.client(world.member).post(url, {"name": "Tensor Board", "port": 80})
    not_owner = world.client(world.vc_admin).post(url, {"name": "web", "port": 8080})
    stranger = world.client(world.outsider).post(url, {"name": "web", "port": 8080})

    assert exposed.status_code == 200, exposed.json()
    assert exposed.json()["ports"][-1] == {"name": "tensorboard", "port": 6006}
    assert taken.status_code == 409 and "already exposes jupyter (8888)" in taken.json()["detail"]
    assert bad.status_code == 400 and set(bad.json()) == {"name", "port"}
    assert not_owner.status_code == 403
    assert stranger.status_code == 404
    job.refresh_from_db()
    assert [p["name"] for p in job.ports] == ["jupyter", "tensorboard"]
    assert job.events.last().reason == "exposed port 6006 as tensorboard"
