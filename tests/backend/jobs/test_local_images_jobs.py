"""Jobs with an image on the local backend, end to end: submitted over REST, the job
manager run in this process, every worker a runc container whose root is the job's image
(an OCI image built in the test with umoci, in the site's image store; no registry)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from backend.jobs.models import JobStatus
from jobmanager.backends.local import LocalBackend
from tests.backend.local_support import JOBS, NODES, JobManager, log_of, submit
from tests.jobmanager.test_local_images import IMAGE, MARKER, build_image
from tests.jobmanager.test_local_sandbox import sandboxed_backend

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


@pytest.fixture
def image_store(host_tmp, settings):
    """The site's image store, holding IMAGE, as the portal's settings name it."""
    store = host_tmp / "image-store"
    build_image(store)
    settings.TRAINYARD_LOCAL_SANDBOX = "runc"
    settings.TRAINYARD_LOCAL_IMAGE_STORE = str(store)
    return store


@pytest.fixture
def backend(host_tmp, settings, image_store) -> Iterator[LocalBackend]:
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    with sandboxed_backend(host_tmp, nodes=NODES, image_store_dir=image_store) as backend:
        yield backend


@pytest.fixture
def jobs(backend, redis_namespace) -> JobManager:
    return JobManager(backend)


def test_a_job_runs_in_its_image_as_its_owner(world, jobs):
    job = submit(world, image=IMAGE, command="cat /etc/os-release; echo UID=$(id -u)")

    job = jobs.run_until(job, JobStatus.FINISHED, JobStatus.FAILED)

    log = log_of(job)
    assert job.status == JobStatus.FINISHED, (job.status_message, log)
    assert MARKER in log
    uid = job.run_as.split("(uid ", 1)[1].split(",", 1)[0]
    assert f"UID={uid}\n" in log


def test_an_image_the_store_lacks_is_a_400_naming_the_field(world, image_store):
    response = world.client(world.member).post(
        JOBS,
        {"vc": "vision", "gpu_type": "A100", "command": "true", "image": "nowhere/absent:1"},
        format="json",
    )
    assert response.status_code == 400
    (message,) = response.json()["image"]
    assert "nowhere/absent:1 is not in this site's image store" in message
    assert "Leave it empty to run on the host's system" in message


def test_an_image_without_the_sandbox_is_a_400(world, settings):
    settings.TRAINYARD_LOCAL_SANDBOX = "none"
    response = world.client(world.member).post(
        JOBS, {"vc": "vision", "gpu_type": "A100", "command": "true", "image": IMAGE}, format="json"
    )
    assert response.status_code == 400
    assert "Images run only in the sandbox" in response.json()["image"][0]


def test_an_image_gone_from_the_store_fails_the_job_saying_why(world, jobs, image_store, settings):
    settings.TRAINYARD_MAX_DEPLOY_FAILURES = 1
    job = submit(world, image=IMAGE, command="true")
    shutil.rmtree(image_store / IMAGE.split(":")[0])  # after the submission's check

    job = jobs.run_until(job, JobStatus.FAILED)

    assert f"The image {IMAGE} is not in this site's image store" in job.status_message
    detail = world.client(world.member).get(f"{JOBS}{job.job_id}/").json()
    assert "is not in this site's image store" in detail["status_message"]
    assert detail["failure_class"] == "user"
