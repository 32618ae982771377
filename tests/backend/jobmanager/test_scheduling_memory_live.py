"""Least attained service and fair share remember on the running system: jobs are real
processes on the local backend, the job manager runs in this process, the VC admin picks
the policy over REST. A preempted job keeps what it ran when it comes back; a member who
used the VC heavily this week waits behind one who did not."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.jobmanager.scheduling import apply_decisions
from backend.jobs.models import Job, JobAttempt, JobStatus
from backend.vcs.models import Quota, Role
from jobmanager.core import Decisions
from jobmanager.core.snapshot import Preemption
from tests.backend.local_support import JobManager, backend, jobs, submit  # noqa: F401 (fixtures)
from tests.factories import JobFactory, MembershipFactory, UserFactory
from tests.polling import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

WHOLE_CLUSTER = {"workers": 4, "gpus_per_worker": 8}  # the four 8-GPU A100 nodes


def use_policy(world, policy: str) -> None:
    Quota.objects.filter(vc=world.vision, gpu_type=world.a100).update(
        gpus=32, cpus=256, memory=2048 * 1024
    )
    answer = world.client(world.vc_admin).patch(
        f"/api/v1/vcs/{world.vision.name}/", {"policy": policy}, format="json"
    )
    assert answer.status_code == 200, answer.json()


def started_first(first: Job, second: Job) -> bool:
    """Whether ``first`` started and ``second`` did not start before it."""
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.started_at is not None
    return second.started_at is None or second.started_at >= first.started_at


def race_after_preemption(world, manager: JobManager, queued_hours: float = 0) -> tuple[Job, Job]:
    """A veteran that ran 3 hours on the whole cluster (96 GPU-hours, past LAS's first
    queue of 16; its attempt's start moved back rather than waited for), submitted
    ``queued_hours`` before it started, preempted as a pass preempts and requeued at its
    place while the VC admin's job runs; a newcomer submitted then. Returns the two once
    one of them has started."""
    use_policy(world, "LAS")
    veteran = submit(world, command="sleep 600", preemptible=True, **WHOLE_CLUSTER)
    veteran = manager.run_until(veteran, JobStatus.RUNNING)
    ran_from = timezone.now() - timedelta(hours=3)
    JobAttempt.objects.filter(job=veteran, number=1).update(started_at=ran_from)
    Job.objects.filter(pk=veteran.pk).update(queued_at=ran_from - timedelta(hours=queued_hours))
    blocker = submit(world, user=world.vc_admin, command="sleep 5", **WHOLE_CLUSTER)
    apply_decisions(
        Decisions(
            preemptions=[Preemption(veteran.job_id, "preempted for the test", blocker.job_id)]
        )
    )
    manager.run_until(blocker, JobStatus.RUNNING)
    newcomer = submit(world, command="sleep 30", preemptible=True, **WHOLE_CLUSTER)

    def one_started() -> bool:
        manager.run()
        newcomer.refresh_from_db()
        veteran.refresh_from_db()
        return newcomer.attempt > 0 or veteran.attempt > 1

    wait_until(one_started, 20, "the newcomer or the veteran to start")
    return veteran, newcomer


def test_a_preempted_job_keeps_its_attained_service_and_waits_behind_a_newer_job_under_las(
    world,
    jobs,  # noqa: F811 (the fixture)
):
    veteran, newcomer = race_after_preemption(world, jobs)

    assert (newcomer.attempt, veteran.attempt) == (1, 1), "the newcomer started first"
    assert veteran.status == JobStatus.QUEUED


def test_a_preempted_job_queued_past_the_las_wait_limit_goes_before_a_newer_job(
    world,
    jobs,  # noqa: F811 (the fixture)
    settings,
):
    settings.TRAINYARD_LAS_WAIT_LIMIT_SECONDS = 3600
    # Queued 2 hours before its first start: past the hour's limit, whatever it ran.
    veteran, newcomer = race_after_preemption(world, jobs, queued_hours=2)

    assert (newcomer.attempt, veteran.attempt) == (0, 2), "the veteran started first"


@pytest.mark.parametrize(
    ("guard", "first"),
    [
        ("TRAINYARD_RF_STARVATION_SECONDS", "newcomer"),
        ("TRAINYARD_LAS_STARVATION_SECONDS", "veteran"),
    ],
    ids=["runnable-first-guard", "las-guard"],
)
def test_a_preempted_job_goes_back_to_las_first_queue_after_las_own_starvation_guard(
    world,
    jobs,  # noqa: F811 (the fixture)
    settings,
    guard,
    first,
):
    """With LAS's guard at 0 the preempted veteran is back in the first queue at once and
    goes before the newer job by its earlier submission; runnable first's guard at 0
    moves nothing under LAS."""
    setattr(settings, guard, 0)
    veteran, newcomer = race_after_preemption(world, jobs)

    expected = {"newcomer": (1, 1), "veteran": (0, 2)}[first]
    assert (newcomer.attempt, veteran.attempt) == expected, f"the {first} started first"


def test_a_member_with_a_week_of_heavy_use_waits_behind_one_with_none_under_fair_share(
    world,
    jobs,  # noqa: F811 (the fixture)
):
    use_policy(world, "FS")
    heavy, light = world.member, UserFactory(username="lena")
    MembershipFactory(vc=world.vision, user=light, role=Role.MEMBER)
    # A week of heavy use: 20 hours on 8 GPUs each day, the jobs long finished.
    now = timezone.now()
    for day in range(1, 8):
        ended = now - timedelta(days=day)
        done = JobFactory(
            owner=heavy, vc=world.vision, gpu_type=world.a100, gpus_per_worker=8,
            status=JobStatus.FINISHED, started_at=ended - timedelta(hours=20), finished_at=ended,
            attempt=1,
        )  # fmt: skip
        JobAttempt.objects.create(
            job=done, number=1, started_at=ended - timedelta(hours=20), ended_at=ended
        )
    # The VC admin's job holds every GPU while both members submit, the heavy user first.
    blocker = submit(world, user=world.vc_admin, command="sleep 4", **WHOLE_CLUSTER)
    jobs.run_until(blocker, JobStatus.RUNNING)
    heavy_job = submit(world, user=heavy, command="sleep 1", **WHOLE_CLUSTER)
    light_job = submit(world, user=light, command="sleep 1", **WHOLE_CLUSTER)

    light_job = jobs.run_until(light_job, JobStatus.RUNNING, JobStatus.FINISHED)
    assert started_first(light_job, heavy_job)
