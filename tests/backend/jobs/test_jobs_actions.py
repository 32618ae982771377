"""Kill, pause and resume one job at a time, and many at once; each change is an event."""

from __future__ import annotations

import pytest

from backend.jobs.models import JobEvent, JobStatus
from tests.backend.jobs_support import JOBS, OMIT, job_url, make_job, submit

pytestmark = pytest.mark.django_db

# action, the job's status before, its status after
TRANSITIONS = [
    ("kill", JobStatus.QUEUED, JobStatus.KILLED),
    ("kill", JobStatus.UNAPPROVED, JobStatus.KILLED),
    ("kill", JobStatus.PAUSED, JobStatus.KILLED),
    ("kill", JobStatus.SCHEDULING, JobStatus.KILLING),
    ("kill", JobStatus.RUNNING, JobStatus.KILLING),
    ("kill", JobStatus.PAUSING, JobStatus.KILLING),
    ("pause", JobStatus.QUEUED, JobStatus.PAUSED),
    ("pause", JobStatus.UNAPPROVED, JobStatus.PAUSED),
    ("pause", JobStatus.SCHEDULING, JobStatus.PAUSING),
    ("pause", JobStatus.RUNNING, JobStatus.PAUSING),
    ("resume", JobStatus.PAUSED, JobStatus.QUEUED),
]


@pytest.mark.parametrize(("action", "before", "after"), TRANSITIONS)
def test_action_moves_the_job_and_records_who_and_why(world, action, before, after):
    job = make_job(world, status=before)
    client = world.client(world.member)

    response = client.post(job_url(job, action), {"reason": "bad lr"}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["status"] == after
    events = client.get(job_url(job, "events")).json()
    assert [(e["from_status"], e["to_status"], e["actor"], e["reason"]) for e in events] == [
        (before, after, "mia", "bad lr")
    ]


@pytest.mark.parametrize(
    ("action", "reason"),
    [("kill", "killed by user"), ("pause", "paused by user")],
)
def test_action_without_a_reason_says_what_happened(world, action, reason):
    job = make_job(world)

    answer = world.client(world.member).post(job_url(job, action)).json()

    assert answer["status_message"] == reason
    assert JobEvent.objects.get(job=job).reason == reason


def test_killing_a_queued_job_finishes_it_at_once(world):
    job = make_job(world)

    answer = world.client(world.member).post(job_url(job, "kill")).json()

    assert answer["status"] == "killed"
    assert answer["finished_at"] is not None


def test_killing_a_running_job_waits_for_the_backend(world):
    job = make_job(world, status=JobStatus.RUNNING)

    answer = world.client(world.member).post(job_url(job, "kill")).json()

    assert answer["status"] == "killing"
    assert answer["finished_at"] is None


def test_resumed_job_has_no_pause_message(world):
    job = make_job(world, status=JobStatus.PAUSED, status_message="paused by user")

    answer = world.client(world.member).post(job_url(job, "resume")).json()

    assert (answer["status"], answer["status_message"]) == ("queued", "")


@pytest.mark.parametrize(
    ("action", "status"),
    [
        ("kill", JobStatus.KILLING),
        ("pause", JobStatus.PAUSED),
        ("pause", JobStatus.PAUSING),
        ("resume", JobStatus.QUEUED),
    ],
)
def test_repeating_an_action_changes_nothing(world, action, status):
    job = make_job(world, status=status)

    response = world.client(world.member).post(job_url(job, action))

    assert response.status_code == 200
    assert response.json()["status"] == status
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.parametrize(
    "status", [JobStatus.KILLED, JobStatus.FINISHED, JobStatus.FAILED, JobStatus.TIMEOUT]
)
def test_killing_a_finished_job_is_a_conflict(world, status):
    job = make_job(world, status=status)

    response = world.client(world.member).post(job_url(job, "kill"))

    assert response.status_code == 409
    assert response.json() == {"detail": f"Job {job.job_id} is already {status}."}
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.parametrize(
    ("action", "status", "detail"),
    [
        ("pause", JobStatus.FINISHED, "is finished and cannot be paused"),
        ("pause", JobStatus.KILLING, "is killing and cannot be paused"),
        ("resume", JobStatus.RUNNING, "is running; only a paused job can resume"),
        ("resume", JobStatus.FAILED, "is failed; only a paused job can resume"),
    ],
)
def test_action_the_status_does_not_allow_is_a_conflict(world, action, status, detail):
    job = make_job(world, status=status)

    response = world.client(world.member).post(job_url(job, action))

    assert response.status_code == 409
    assert detail in response.json()["detail"]
    job.refresh_from_db()
    assert job.status == status


def test_vc_admin_kills_a_members_job_in_their_own_name(world):
    job = make_job(world, status=JobStatus.RUNNING)

    world.client(world.vc_admin).post(job_url(job, "kill"), {"reason": "hogging"}, format="json")

    event = JobEvent.objects.get(job=job)
    assert (event.actor, event.actor_name, event.reason) == (world.vc_admin, "vera", "hogging")


def test_events_tell_a_jobs_whole_story_in_order(world):
    client = world.client(world.member)
    job_id = submit(client).json()["id"]

    for action in ("pause", "resume", "kill"):
        client.post(f"{JOBS}{job_id}/{action}/")

    events = client.get(f"{JOBS}{job_id}/events/").json()
    assert [(e["from_status"], e["to_status"]) for e in events] == [
        ("", "queued"),
        ("queued", "paused"),
        ("paused", "queued"),
        ("queued", "killed"),
    ]
    assert {e["actor"] for e in events} == {"mia"}


@pytest.mark.parametrize(
    "body", [["kill"], {"reason": "x" * 501}], ids=["list body", "long reason"]
)
def test_malformed_action_body_is_a_bad_request(world, body):
    job = make_job(world)

    response = world.client(world.member).post(job_url(job, "kill"), body, format="json")

    assert response.status_code == 400
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


# --- Per-user GPU limit and pausing --------------------------------------------------------


@pytest.fixture
def limited(world):
    world.vision.user_gpu_limit = 8
    world.vision.save()
    return world


def test_resuming_an_unapproved_job_still_needs_approval(limited):
    client = limited.client(limited.member)
    job_id = submit(client, workers=2, gpus_per_worker=8).json()["id"]
    client.post(f"{JOBS}{job_id}/pause/")

    answer = client.post(f"{JOBS}{job_id}/resume/").json()

    assert answer["status"] == "unapproved"
    assert "per-user limit of 8" in answer["status_message"]


def test_resuming_past_the_user_gpu_limit_needs_approval(limited):
    client = limited.client(limited.member)
    paused_id = submit(client, gpus_per_worker=8).json()["id"]
    client.post(f"{JOBS}{paused_id}/pause/")
    assert submit(client, gpus_per_worker=8).json()["status"] == "queued"

    answer = client.post(f"{JOBS}{paused_id}/resume/").json()

    assert answer["status"] == "unapproved"


def test_resuming_an_approved_job_needs_no_second_approval(limited):
    client = limited.client(limited.member)
    job_id = submit(client, workers=2, gpus_per_worker=8).json()["id"]
    limited.client(limited.vc_admin).post(f"{JOBS}{job_id}/approve/")
    client.post(f"{JOBS}{job_id}/pause/")

    answer = client.post(f"{JOBS}{job_id}/resume/").json()

    assert answer["status"] == "queued"


# --- Batch ---------------------------------------------------------------------------------

BATCH = f"{JOBS}batch/"


def test_batch_answers_each_id_on_its_own(world):
    queued = make_job(world)
    finished = make_job(world, status=JobStatus.FINISHED)
    foreign = make_job(world, owner=world.outsider, vc=world.nlp)
    ids = [queued.job_id, finished.job_id, foreign.job_id, "nosuchjob1"]

    response = world.client(world.member).post(
        BATCH, {"action": "kill", "ids": ids, "reason": "cleanup"}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert response.json() == {
        "action": "kill",
        "results": [
            {"id": queued.job_id, "ok": True, "status": "killed"},
            {
                "id": finished.job_id,
                "ok": False,
                "error": f"Job {finished.job_id} is already finished.",
            },
            {"id": foreign.job_id, "ok": False, "error": "Not found."},
            {"id": "nosuchjob1", "ok": False, "error": "Not found."},
        ],
    }
    foreign.refresh_from_db()
    assert foreign.status == JobStatus.QUEUED
    assert not JobEvent.objects.filter(job=foreign).exists()
    assert JobEvent.objects.get(job=queued).reason == "cleanup"


def test_batch_approve_by_a_member_is_refused_per_job(world):
    job = make_job(world, status=JobStatus.UNAPPROVED)

    response = world.client(world.member).post(
        BATCH, {"action": "approve", "ids": [job.job_id]}, format="json"
    )

    assert response.json()["results"] == [
        {"id": job.job_id, "ok": False, "error": "Only an admin of VC vision can approve jobs."}
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.UNAPPROVED


def test_batch_approve_by_the_vc_admin(world):
    jobs = [make_job(world, status=JobStatus.UNAPPROVED) for _ in range(2)]

    response = world.client(world.vc_admin).post(
        BATCH, {"action": "approve", "ids": [job.job_id for job in jobs]}, format="json"
    )

    assert [result["status"] for result in response.json()["results"]] == ["queued", "queued"]


def test_batch_answers_a_repeated_id_once(world):
    job = make_job(world)

    response = world.client(world.member).post(
        BATCH, {"action": "pause", "ids": [job.job_id, job.job_id]}, format="json"
    )

    assert response.json()["results"] == [{"id": job.job_id, "ok": True, "status": "paused"}]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"action": "explode"}, "action"),
        ({"action": OMIT}, "action"),
        ({"ids": []}, "ids"),
        ({"ids": "abc"}, "ids"),
    ],
    ids=["unknown action", "no action", "no ids", "ids not a list"],
)
def test_malformed_batch_is_a_bad_request(world, fields, field):
    job = make_job(world)
    body = {"action": "kill", "ids": [job.job_id]} | fields

    response = world.client(world.member).post(
        BATCH, {name: value for name, value in body.items() if value is not OMIT}, format="json"
    )

    assert response.status_code == 400
    assert field in response.json()
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def test_anonymous_batch_is_refused(world, anonymous):
    job = make_job(world)

    response = anonymous.post(BATCH, {"action": "kill", "ids": [job.job_id]}, format="json")

    assert response.status_code == 401
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
