"""A submission or a job action that MariaDB chooses as a deadlock's victim is done on a
second run, not answered 503 (a documented submission met one beside the job manager's
pass on MariaDB).

The job manager's stand-in takes two rows a submission needs in the other order: a real
deadlock on the real server. It has written more rows first, so InnoDB rolls the
submission back, as it did to the documented one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.utils import timezone

from backend.clusters.models import Node
from backend.jobs import actions
from backend.jobs.models import Job, JobArray
from backend.vcs.models import Membership, VirtualCluster
from tests.backend.jobs_support import JOBS, make_job, submit
from tests.polling import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def limited(world):
    """Vision has a per-user GPU limit, so a member's submission locks its membership."""
    if connection.vendor != "mysql":
        pytest.skip("a deadlock victim is MariaDB/MySQL's (SQLite locks the whole file)")
    world.vision.user_gpu_limit = 8
    world.vision.save()
    return world


def waiting_for_a_lock() -> int:
    """How many other connections to this test's database wait for a row lock (the
    server is shared with other test processes)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX AS trx"
            " JOIN information_schema.PROCESSLIST AS p ON p.ID = trx.trx_mysql_thread_id"
            " WHERE trx.trx_state = 'LOCK WAIT' AND p.DB = DATABASE() AND p.ID <> CONNECTION_ID()"
        )
        return cursor.fetchone()[0]


def crossed_with(
    submission: Callable[[], object], first: Callable[[], None], then: Callable[[], None]
) -> object:
    """Run ``submission`` in a thread while a heavier transaction here takes ``first``,
    waits until the submission is blocked on it, then takes ``then``; the submission's
    answer."""
    answers: list[object] = []

    def submit_in_a_thread() -> None:
        try:
            answers.append(submission())
        finally:
            connections.close_all()

    thread = threading.Thread(target=submit_in_a_thread)
    with transaction.atomic():
        Node.objects.update(last_heartbeat=timezone.now())  # weight: rows written
        first()
        thread.start()
        wait_until(waiting_for_a_lock, 30, "the submission to wait for the row held here")
        then()  # the cycle: InnoDB rolls back the lighter transaction, the submission
    thread.join(timeout=60)
    assert not thread.is_alive()
    return answers[0]


def counting_runs(monkeypatch, name: str) -> list[int]:
    runs = [0]
    store = getattr(actions, name)

    def counted(*args: object) -> object:
        runs[0] += 1
        return store(*args)

    monkeypatch.setattr(actions, name, counted)
    return runs


def test_a_submission_chosen_as_a_deadlocks_victim_is_stored_on_a_second_run(limited, monkeypatch):
    runs = counting_runs(monkeypatch, "_store_job")
    vc = VirtualCluster.objects.select_for_update().filter(pk=limited.vision.pk)
    membership = Membership.objects.select_for_update().filter(user=limited.member)

    response = crossed_with(
        lambda: submit(limited.client(limited.member), gpus_per_worker=2),
        first=lambda: list(vc),  # the job's row refers to its VC's
        then=lambda: list(membership),  # the submission holds its membership first
    )

    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "queued"
    assert runs == [2]  # rolled back once, then stored
    assert Job.objects.get().job_id == response.json()["id"]


def test_an_array_chosen_as_a_deadlocks_victim_is_stored_whole_on_a_second_run(
    limited, monkeypatch
):
    runs = counting_runs(monkeypatch, "_store_job_array")
    vc = VirtualCluster.objects.select_for_update().filter(pk=limited.vision.pk)
    membership = Membership.objects.select_for_update().filter(user=limited.member)

    response = crossed_with(
        lambda: submit(limited.client(limited.member), gpus_per_worker=2, array={"count": 3}),
        first=lambda: list(membership),  # the array's row refers to its VC's first
        then=lambda: list(vc),
    )

    assert response.status_code == 201, response.json()
    assert runs == [2]
    assert JobArray.objects.get().size == 3
    assert sorted(Job.objects.values_list("job_id", flat=True)) == sorted(response.json()["jobs"])


def test_a_kill_chosen_as_a_deadlocks_victim_is_done_on_a_second_run(limited):
    job = make_job(limited)
    held_job = Job.objects.select_for_update().filter(pk=job.pk)
    owner = User.objects.select_for_update().filter(pk=limited.member.pk)

    response = crossed_with(
        lambda: limited.client(limited.member).post(f"{JOBS}{job.job_id}/kill/", {}, "json"),
        first=lambda: list(owner),  # the kill's event refers to its actor
        then=lambda: list(held_job),  # the kill holds its job first
    )

    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "killed"
    assert job.events.filter(to_status="killed").count() == 1
