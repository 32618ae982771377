"""The repair manager in the database: moves by hand over the API, draining, the email
outbox, and the rules file checked at start. (Against Prometheus: test_repairs_live.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from backend.clusters.models import Node, RepairState
from backend.core.models import OutgoingEmail
from backend.core.outbox import queue_email, send_pending_emails
from backend.jobs.models import JobStatus
from backend.repairs.manager import repair_pass
from backend.repairs.models import NodeFault, NodeRepairEvent
from jobmanager.backends.memory import MemoryBackend
from repairmanager.rules import load_rules
from tests.backend.jobs_support import JobManager, make_job
from tests.servers import free_port

pytest_plugins = ["tests.smtp"]

pytestmark = pytest.mark.django_db

REPAIRS = "/api/v1/node-repairs/"
RULES = load_rules()


def move(client, node: str, to_state: str, **extra):
    body = {"to_state": to_state} | extra
    return client.post(f"{REPAIRS}{node}/move/", body, format="json")


def test_everyone_signed_in_sees_repair_states_and_open_faults(world, anonymous):
    NodeFault.objects.create(
        node=world.nodes[0], rule="gpu-hot", fault="GPU temperature above 90 °C",
        detail="GPU 2", severity="warning", action="alert",
    )  # fmt: skip
    response = world.client(world.outsider).get(REPAIRS)
    assert response.status_code == 200
    rows = {row["name"]: row for row in response.json()["results"]}
    assert rows["a100-1"]["repair_state"] == "in_service"
    assert [fault["detail"] for fault in rows["a100-1"]["open_faults"]] == ["GPU 2"]
    assert rows["a100-2"]["open_faults"] == []
    assert anonymous.get(REPAIRS).status_code in (401, 403)
    faults = world.client(world.member).get("/api/v1/node-faults/?open=true").json()["results"]
    assert [(fault["node"], fault["rule"]) for fault in faults] == [("a100-1", "gpu-hot")]


def test_cluster_admins_move_nodes_through_the_cycle_by_hand(world):
    admin = world.client(world.staff)
    response = move(admin, "a100-1", "out_of_pool", reason="fan noise")
    assert response.status_code == 200, response.json()
    assert response.json()["repair_state"] == "out_of_pool"
    assert response.json()["history"] == [
        {
            "from_state": "in_service", "to_state": "out_of_pool", "reason": "fan noise",
            "rule": "", "actor": "root", "created_at": response.json()["history"][0]["created_at"],
        }
    ]  # fmt: skip
    node = Node.objects.get(name="a100-1")
    assert not node.schedulable  # cordoned: no new work
    for state in ("ready_for_repair", "in_repair", "after_repair"):
        assert move(admin, "a100-1", state).status_code == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"to_state": "in_repair"}, "can move to out_of_pool, not to in_repair"),
        ({"to_state": "broken"}, "not a valid choice"),
        ({}, "required"),
    ],
)
def test_moves_outside_the_cycle_are_refused_with_the_field(world, body, message):
    response = world.client(world.staff).post(f"{REPAIRS}a100-1/move/", body, format="json")
    assert response.status_code == 400
    assert message in response.json()["to_state"][0]
    assert NodeRepairEvent.objects.count() == 0


def test_only_cluster_admins_move_nodes(world):
    for user in (world.member, world.vc_admin):
        assert move(world.client(user), "a100-1", "out_of_pool").status_code == 403
    assert move(world.client(world.staff), "nope", "out_of_pool").status_code == 404
    assert Node.objects.get(name="a100-1").repair_state == RepairState.IN_SERVICE


def test_a_silent_node_drains_its_jobs_until_the_deadline(world, settings, redis_namespace):
    """No heartbeat: out of the pool at once, but the running job may finish; past the
    drain deadline it is moved, and the drained node is ready for repair."""
    settings.TRAINYARD_REPAIR_MAX_OUT_SHARE = 0.5
    settings.TRAINYARD_REPAIR_DRAIN_SECONDS = 600
    job_manager = JobManager(MemoryBackend())
    job = make_job(world, gpus_per_worker=8)
    job_manager.run()
    job.refresh_from_db()
    node = job.placement[0]["node"]
    now = timezone.now()
    Node.objects.filter(name=node).update(last_heartbeat=now - timedelta(minutes=3))

    summary = repair_pass(RULES, None, now)
    assert summary.taken_out == [node]
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING  # left to finish
    assert Node.objects.get(name=node).repair_state == RepairState.OUT_OF_POOL

    later = now + timedelta(seconds=601)
    NodeRepairEvent.objects.filter(to_state="out_of_pool").update(created_at=now)
    summary = repair_pass(RULES, None, later)
    assert summary.jobs_moved == [job.job_id]
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSING and job.retries_used == 0
    assert job.repair_message.startswith(f"node {node}: drain deadline passed (no heartbeat")
    job_manager.run()  # the backend lets go; the job waits for a healthy node
    repair_pass(RULES, None, later)
    assert Node.objects.get(name=node).repair_state == RepairState.READY_FOR_REPAIR
    job.refresh_from_db()
    assert job.status in (JobStatus.QUEUED, JobStatus.RUNNING)
    assert node not in {worker["node"] for worker in job.placement}
    first = job.attempts.get(number=1)  # ended by the node's fault, not by the job
    assert (first.failure_class, first.failure_rule) == ("infrastructure", "node-repair")


def test_an_email_smtp_refused_stays_owed_and_goes_out_later(settings, smtp):
    settings.EMAIL_PORT, working_port = free_port(), settings.EMAIL_PORT  # nobody listens
    assert queue_email("fault:1", ["root@example.com"], "a100-1: ECC", "body")
    assert not queue_email("fault:1", ["root@example.com"], "a100-1: ECC", "body")  # once
    assert send_pending_emails() == 0
    owed = OutgoingEmail.objects.get()
    assert owed.sent_at is None and owed.last_error
    settings.EMAIL_PORT = working_port
    assert send_pending_emails() == 1
    assert send_pending_emails() == 0
    assert [message["Subject"] for message in smtp.to("root@example.com")] == [
        "[Trainyard] a100-1: ECC"
    ]


def test_a_bad_rules_file_is_reported_when_a_process_starts(tmp_path, settings):
    from backend.repairs.apps import check_repair_rules

    assert check_repair_rules() == []
    bad = tmp_path / "rules.yaml"
    bad.write_text("rules: [{name: ecc, query: up, action: reboot}]")
    settings.TRAINYARD_REPAIR_RULES = str(bad)
    [error] = check_repair_rules()
    assert "rule 'ecc' action: 'reboot' is not one of" in error.msg


@pytest.mark.parametrize(
    ("value", "message"), [("lots", "must be a number"), ("1.5", "must be between 0.0 and 1.0")]
)
def test_a_bad_safety_valve_share_stops_the_process_with_a_clear_message(
    monkeypatch, value, message
):
    from django.core.exceptions import ImproperlyConfigured

    from backend.env import env_float

    monkeypatch.setenv("TRAINYARD_REPAIR_MAX_OUT_SHARE", value)
    with pytest.raises(ImproperlyConfigured, match=f"TRAINYARD_REPAIR_MAX_OUT_SHARE {message}"):
        env_float("TRAINYARD_REPAIR_MAX_OUT_SHARE", 0.1, 0.0, 1.0)
    monkeypatch.setenv("TRAINYARD_REPAIR_MAX_OUT_SHARE", "0.25")
    assert env_float("TRAINYARD_REPAIR_MAX_OUT_SHARE", 0.1, 0.0, 1.0) == 0.25


def test_a_node_taken_out_asks_for_a_job_manager_run_itself_not_by_a_signal(
    world, redis_namespace, settings, django_capture_on_commit_callbacks, monkeypatch
):
    from backend.jobmanager import tasks
    from backend.repairs.actions import move_node

    settings.TRAINYARD_TRIGGER_JOB_MANAGER = True
    runs = []
    monkeypatch.setattr(tasks.run_job_manager, "apply_async", lambda *a, **k: runs.append(1))
    node = world.nodes[0]

    with django_capture_on_commit_callbacks(execute=True):
        node.labels = {"rack": "r9"}
        node.save()  # a bare save is no action: nothing is asked of the job manager
    assert runs == []

    with django_capture_on_commit_callbacks(execute=True):
        move_node(node, RepairState.OUT_OF_POOL, "ECC errors")
    assert runs == [1]
