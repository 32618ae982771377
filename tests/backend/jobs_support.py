"""Helpers shared by the jobs API tests: the endpoint, a submission, a job in a given state."""

from __future__ import annotations

from backend.jobmanager import manager
from backend.jobs.models import Job, JobStatus
from jobmanager.backends import ClusterBackend
from tests.factories import JobFactory

JOBS = "/api/v1/jobs/"
OMIT = object()  # a field the submission leaves out


def job_url(job: Job, action: str = "") -> str:
    return f"{JOBS}{job.job_id}/" + (f"{action}/" if action else "")


def submit(client, headers: dict[str, str] | None = None, **fields):
    """POST a submission into VC vision on A100 unless the fields say otherwise."""
    body = {"vc": "vision", "command": "python train.py", "gpu_type": "A100"} | fields
    body = {name: value for name, value in body.items() if value is not OMIT}
    return client.post(JOBS, body, format="json", headers=headers)


def make_job(world, owner=None, status: str = JobStatus.QUEUED, **fields) -> Job:
    """A job in VC vision owned by the member, unless told otherwise."""
    fields.setdefault("vc", world.vision)
    fields.setdefault("gpu_type", world.a100)
    return JobFactory(owner=owner or world.member, status=status, **fields)


class JobManager:
    """Runs the job manager by hand, deploying at once, as a Celery worker would."""

    def __init__(
        self, backend: ClusterBackend, deploy_round: manager.DeployRound | None = None
    ) -> None:
        self.backend = backend
        self.deploy_round = deploy_round

    def run(self) -> manager.RunSummary:
        """One run; without a deploy callback of the test's, the round's attempts are
        deployed in turn on the backend of the moment (a test may swap ``backend``)."""
        deploy_round = self.deploy_round or manager.deploy_in_turn(self.backend)
        return manager.run_job_manager(self.backend, deploy_round)
