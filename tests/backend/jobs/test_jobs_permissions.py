"""Who may see and act on a job: owner, VC admin, cluster admin; others do not learn it exists.

The roles are tests/backend/resources.py's: ``member`` (mia, owns the job), ``colleague``
(cole, another member of vision), ``vc_admin`` (vera), ``other_vc_member`` (otto, in nlp),
``other_vc_admin`` (nora, nlp's admin), ``cluster_admin`` (root) and ``anonymous``.
"""

from __future__ import annotations

import pytest

from backend.jobs.models import JobEvent, JobStatus
from tests.backend.jobs_support import JOBS, job_url, make_job
from tests.backend.resources import ANONYMOUS, ResourceTests

pytestmark = pytest.mark.django_db

ALLOWED = ["member", "vc_admin", "cluster_admin"]
HIDDEN = ["colleague", "other_vc_member", "other_vc_admin"]


class JobResource(ResourceTests):
    url = JOBS

    def detail_url(self, job) -> str:
        return job_url(job)


class TestReadingAJob(JobResource):
    methods = {"events": "get", "attempts": "get", "log": "get"}
    expected = {
        action: {role: 200 for role in ALLOWED} | {role: 404 for role in HIDDEN} | {ANONYMOUS: 401}
        for action in ("retrieve", "events", "attempts", "log")
    }

    @pytest.fixture
    def resource(self, world, settings, tmp_path):
        """Mia's running job in vision, with a log."""
        settings.TRAINYARD_LOG_DIR = tmp_path
        job = make_job(world, status=JobStatus.RUNNING)
        (tmp_path / job.job_id).mkdir()
        (tmp_path / job.job_id / "worker-0.log").write_text("epoch 1\n")
        return job

    def check(self, action, role, user, response, job) -> None:
        if response.status_code == 404:
            assert response.json() == {"detail": "No Job matches the given query."}


class TestActingOnAHiddenJob(JobResource):
    """Acting on a job one may not see is not found and changes nothing."""

    expected = {
        action: {role: 404 for role in HIDDEN} | {ANONYMOUS: 401}
        for action in ("kill", "pause", "approve")
    }

    @pytest.fixture
    def resource(self, world):
        return make_job(world, status=JobStatus.UNAPPROVED)

    def check(self, action, role, user, response, job) -> None:
        job.refresh_from_db()
        assert job.status == JobStatus.UNAPPROVED
        assert not JobEvent.objects.filter(job=job).exists()


class TestActingOnAJob(JobResource):
    """The owner and admins may kill; approving needs the job's VC admin (or a cluster admin)."""

    expected = {
        "kill": {role: 200 for role in ALLOWED},
        "approve": {"vc_admin": 200, "cluster_admin": 200, "member": 403, "other_vc_admin": 404},
    }

    @pytest.fixture
    def resource(self, world, action):
        running = action == "kill"
        return make_job(world, status=JobStatus.RUNNING if running else JobStatus.UNAPPROVED)

    def check(self, action, role, user, response, job) -> None:
        job.refresh_from_db()
        if action == "kill":
            assert JobEvent.objects.get(job=job).actor == user
        else:
            approved = response.status_code == 200
            assert job.status == (JobStatus.QUEUED if approved else JobStatus.UNAPPROVED)


# --- Lists ---------------------------------------------------------------------------------


@pytest.fixture
def jobs_by_owner(world, roles) -> dict[str, str]:
    """One job for each of mia, vera and cole in vision, and otto in nlp: owner -> job id."""
    owners = {"member": world.vision, "vc_admin": world.vision, "colleague": world.vision}
    jobs = {role: make_job(world, owner=roles[role], vc=vc) for role, vc in owners.items()}
    jobs["other_vc_member"] = make_job(world, owner=world.outsider, vc=world.nlp)
    return {role: job.job_id for role, job in jobs.items()}


@pytest.mark.parametrize(
    ("role", "sees"),
    [
        ("member", ["member"]),
        ("colleague", ["colleague"]),
        ("vc_admin", ["member", "vc_admin", "colleague"]),
        ("cluster_admin", ["member", "vc_admin", "colleague", "other_vc_member"]),
        ("other_vc_member", ["other_vc_member"]),
        ("other_vc_admin", ["other_vc_member"]),
    ],
)
def test_list_shows_only_what_the_user_may_see(world, roles, jobs_by_owner, role, sees):
    response = world.client(roles[role]).get(JOBS)

    assert response.status_code == 200
    assert sorted(job["id"] for job in response.json()["results"]) == sorted(
        jobs_by_owner[owner] for owner in sees
    )
    assert response.json()["count"] == len(sees)


def test_filtering_by_another_tenants_vc_shows_nothing(world, roles, jobs_by_owner):
    response = world.client(world.member).get(JOBS, {"vc": "nlp"})

    assert response.json()["count"] == 0


def test_anonymous_cannot_list(world, anonymous):
    make_job(world)

    response = anonymous.get(JOBS)

    assert response.status_code == 401
    assert "results" not in response.json()


def test_batch_cannot_reach_a_colleagues_job(world, roles):
    job = make_job(world, owner=roles["colleague"])

    response = world.client(world.member).post(
        f"{JOBS}batch/", {"action": "kill", "ids": [job.job_id]}, format="json"
    )

    assert response.json()["results"] == [{"id": job.job_id, "ok": False, "error": "Not found."}]
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
