"""Who may see and act on a job: owner, VC admin, cluster admin; others do not learn it exists.

``world`` has ``mia`` (member of vision, owns the job), ``vera`` (vision's admin), ``root``
(cluster admin) and ``otto`` (member of nlp); here also ``cole``, another member of vision,
and ``nora``, nlp's admin.
"""

from __future__ import annotations

import pytest

from backend.jobs.models import JobEvent, JobStatus
from backend.vcs.models import Role
from tests.backend.jobs_support import JOBS, job_url, make_job
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

ALLOWED = ["member", "vc_admin", "staff"]
HIDDEN = ["colleague", "outsider", "other_vc_admin"]


@pytest.fixture
def users(world) -> dict[str, object]:
    colleague = UserFactory(username="cole")
    other_vc_admin = UserFactory(username="nora")
    MembershipFactory(vc=world.vision, user=colleague, role=Role.MEMBER)
    MembershipFactory(vc=world.nlp, user=other_vc_admin, role=Role.ADMIN)
    return {
        "member": world.member,
        "vc_admin": world.vc_admin,
        "staff": world.staff,
        "colleague": colleague,
        "outsider": world.outsider,
        "other_vc_admin": other_vc_admin,
        "anonymous": None,
    }


@pytest.fixture
def logged_job(world, settings, tmp_path):
    """Mia's running job in vision, with a log."""
    settings.TRAINYARD_LOG_DIR = tmp_path
    job = make_job(world, status=JobStatus.RUNNING)
    (tmp_path / job.job_id).mkdir()
    (tmp_path / job.job_id / "worker-0.log").write_text("epoch 1\n")
    return job


def expected_status(role: str, allowed: int) -> int:
    if role == "anonymous":
        return 401
    return allowed if role in ALLOWED else 404


@pytest.mark.parametrize("action", ["", "events", "attempts", "log"])
@pytest.mark.parametrize("role", [*ALLOWED, *HIDDEN, "anonymous"])
def test_reading_a_job(world, users, logged_job, role, action):
    response = world.client(users[role]).get(job_url(logged_job, action))

    assert response.status_code == expected_status(role, 200)
    if response.status_code == 404:
        assert response.json() == {"detail": "No Job matches the given query."}


@pytest.mark.parametrize("action", ["kill", "pause", "approve"])
@pytest.mark.parametrize("role", [*HIDDEN, "anonymous"])
def test_acting_on_a_hidden_job_is_not_found_and_changes_nothing(world, users, role, action):
    job = make_job(world, status=JobStatus.UNAPPROVED)

    response = world.client(users[role]).post(job_url(job, action))

    assert response.status_code == expected_status(role, 200)
    job.refresh_from_db()
    assert job.status == JobStatus.UNAPPROVED
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.parametrize("role", ALLOWED)
def test_owner_and_admins_may_kill(world, users, role):
    job = make_job(world, status=JobStatus.RUNNING)

    response = world.client(users[role]).post(job_url(job, "kill"))

    assert response.status_code == 200
    assert JobEvent.objects.get(job=job).actor == users[role]


@pytest.mark.parametrize(
    ("role", "status"),
    [("vc_admin", 200), ("staff", 200), ("member", 403), ("other_vc_admin", 404)],
)
def test_approving_needs_the_jobs_vc_admin(world, users, role, status):
    job = make_job(world, status=JobStatus.UNAPPROVED)

    response = world.client(users[role]).post(job_url(job, "approve"))

    assert response.status_code == status
    job.refresh_from_db()
    assert job.status == (JobStatus.QUEUED if status == 200 else JobStatus.UNAPPROVED)


# --- Lists ---------------------------------------------------------------------------------


@pytest.fixture
def jobs_by_owner(world, users) -> dict[str, str]:
    """One job for each of mia, vera and cole in vision, and otto in nlp: owner -> job id."""
    owners = {"member": world.vision, "vc_admin": world.vision, "colleague": world.vision}
    jobs = {role: make_job(world, owner=users[role], vc=vc) for role, vc in owners.items()}
    jobs["outsider"] = make_job(world, owner=world.outsider, vc=world.nlp)
    return {role: job.job_id for role, job in jobs.items()}


@pytest.mark.parametrize(
    ("role", "sees"),
    [
        ("member", ["member"]),
        ("colleague", ["colleague"]),
        ("vc_admin", ["member", "vc_admin", "colleague"]),
        ("staff", ["member", "vc_admin", "colleague", "outsider"]),
        ("outsider", ["outsider"]),
        ("other_vc_admin", ["outsider"]),
    ],
)
def test_list_shows_only_what_the_user_may_see(world, users, jobs_by_owner, role, sees):
    response = world.client(users[role]).get(JOBS)

    assert response.status_code == 200
    assert sorted(job["id"] for job in response.json()["results"]) == sorted(
        jobs_by_owner[owner] for owner in sees
    )
    assert response.json()["count"] == len(sees)


def test_filtering_by_another_tenants_vc_shows_nothing(world, users, jobs_by_owner):
    response = world.client(world.member).get(JOBS, {"vc": "nlp"})

    assert response.json()["count"] == 0


def test_anonymous_cannot_list(world, anonymous):
    make_job(world)

    response = anonymous.get(JOBS)

    assert response.status_code == 401
    assert "results" not in response.json()


def test_batch_cannot_reach_a_colleagues_job(world, users):
    job = make_job(world, owner=users["colleague"])

    response = world.client(world.member).post(
        f"{JOBS}batch/", {"action": "kill", "ids": [job.job_id]}, format="json"
    )

    assert response.json()["results"] == [{"id": job.job_id, "ok": False, "error": "Not found."}]
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
