"""The repair manager against real parts: node agents serving injected faults, the Debian
Prometheus scraping them every second, and a real SMTP server receiving the emails.

The repair manager and the job manager are run by hand here, round after round until
the expected state shows (as beat would run them every few seconds).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from backend.clusters.models import Node, RepairState
from backend.jobs.models import Job, JobStatus
from backend.repairs.manager import run_repair_manager
from backend.repairs.models import NodeFault
from jobmanager.backends.memory import MemoryBackend
from tests.backend.jobs_support import JobManager, make_job
from tests.backend.repair_support import (  # noqa: F401 - the fixtures
    eager_celery_fixture,
    start_agents,
    start_prometheus,
    stop_at_end_fixture,
)
from tests.factories import GpuTypeFactory, NodeFactory, UserFactory
from tests.polling import wait_until

pytest_plugins = ["tests.smtp"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

ADMIN = "root@example.com"  # the world's cluster admin
ECC = {"gpus": {"3": {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1}}}


@pytest.fixture
def repair_settings(settings, redis_namespace, smtp, eager_celery, tmp_path):
    settings.TRAINYARD_BACKEND = "memory"  # where the repair manager cordons nodes too
    settings.TRAINYARD_MEMORY_BACKEND_STATE = tmp_path / "memory-backend.json"
    settings.TRAINYARD_REPAIR_ALERT_EMAILS = []
    settings.TRAINYARD_REPAIR_MAX_OUT_SHARE = 0.1
    return settings


def passes(job_manager: JobManager | None = None):
    """One round of what beat runs: the repair manager, then the job manager."""

    def round_() -> None:
        run_repair_manager()
        if job_manager is not None:
            job_manager.run()

    return round_


def until(condition, round_, timeout: float, what: str) -> None:
    def check() -> bool:
        round_()
        return condition()

    wait_until(check, timeout, what)


def repair_state(name: str) -> str:
    return Node.objects.get(name=name).repair_state


def test_an_ecc_error_moves_the_job_off_and_the_node_comes_back_after_repair(
    world,
    repair_settings,
    smtp,
    tmp_path,
    stop_at_end,
):
    gpu_nodes = [node.name for node in world.nodes if node.gpus]
    agents = {a.node: a for a in start_agents(tmp_path, gpu_nodes, gpus=8)}
    stop_at_end.extend(agents.values())
    prometheus = start_prometheus(tmp_path / "prometheus", [a.target for a in agents.values()])
    stop_at_end.append(prometheus)
    repair_settings.TRAINYARD_PROMETHEUS_URL = prometheus.url
    repair_settings.TRAINYARD_REPAIR_MAX_OUT_SHARE = 0.2  # 1 of the world's 6 nodes
    wait_until(lambda: prometheus.sees("count(DCGM_FI_DEV_GPU_TEMP)", 32), 30, "all GPUs scraped")

    job_manager = JobManager(MemoryBackend())
    job = make_job(world, gpus_per_worker=8, max_retries=1)
    job_manager.run()
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    failing = job.placement[0]["node"]

    agents[failing].inject(ECC)
    round_ = passes(job_manager)
    until(lambda: repair_state(failing) != RepairState.IN_SERVICE, round_, 20, "out of the pool")
    history = world.client(world.member).get(f"/api/v1/node-repairs/{failing}/").json()
    assert history["history"][0]["from_state"] == "in_service"
    assert history["history"][0]["to_state"] == "out_of_pool"
    assert history["history"][0]["reason"] == "double-bit ECC error on GPU 3 (rule ecc-double-bit)"
    assert not Node.objects.get(name=failing).schedulable

    def restarted() -> bool:
        job.refresh_from_db()
        return job.status == JobStatus.RUNNING and "restarted on" in job.repair_message

    until(restarted, round_, 20, "the job restarted elsewhere")
    healthy = job.placement[0]["node"]
    assert healthy != failing
    assert job.attempt == 2
    assert job.retries_used == 0  # no retry spent
    first = job.attempts.get(number=1)
    assert (first.failure_class, first.failure_rule) == ("infrastructure", "node-repair")
    assert re.fullmatch(
        rf"node {failing}: double-bit ECC error on GPU 3 at \d\d:\d\d; restarted on {healthy}",
        job.repair_message,
    )
    detail = world.client(world.member).get(f"/api/v1/jobs/{job.job_id}/").json()
    assert detail["repair_message"] == job.repair_message

    wait_until(lambda: len(smtp.to(ADMIN)) >= 1, 10, "the alert email")
    wait_until(lambda: len(smtp.to(world.member.email)) >= 1, 10, "the owner's note")
    until(lambda: repair_state(failing) == RepairState.READY_FOR_REPAIR, round_, 10, "drained")
    for _ in range(3):  # the fault still holds: no second alert
        round_()
    alerts = smtp.to(ADMIN)
    assert len(alerts) == 1
    assert f"{failing}: double-bit ECC error on GPU 3" in alerts[0]["Subject"]
    assert "jobs moved to healthy nodes at once" in alerts[0].get_payload()
    note = smtp.to(world.member.email)
    assert len(note) == 1 and job.job_id in note[0]["Subject"]

    # Repair by hand; validation refuses while the GPU still reports the error.
    admin = world.client(world.staff)
    url = f"/api/v1/node-repairs/{failing}/move/"
    assert admin.post(url, {"to_state": "in_repair"}, format="json").status_code == 200
    assert admin.post(url, {"to_state": "after_repair"}, format="json").status_code == 200
    until(lambda: repair_state(failing) == RepairState.IN_REPAIR, round_, 10, "failed validation")
    agents[failing].clear()
    dbe = f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{Hostname="{failing}"}} > 0'
    wait_until(lambda: not prometheus.query(dbe), 10, "Prometheus to see the GPU repaired")
    assert admin.post(url, {"to_state": "after_repair"}, format="json").status_code == 200
    until(lambda: repair_state(failing) == RepairState.IN_SERVICE, round_, 10, "back in service")
    node = Node.objects.get(name=failing)
    assert node.schedulable
    history = admin.get(f"/api/v1/node-repairs/{failing}/").json()["history"]
    states = [event["to_state"] for event in history]
    assert states == [
        "out_of_pool", "ready_for_repair", "in_repair", "after_repair", "in_repair",
        "after_repair", "in_service",
    ]  # fmt: skip

    # It takes work again: fill every A100 node, the repaired one included.
    fillers = [make_job(world, owner=world.vc_admin, gpus_per_worker=8) for _ in range(3)]
    fillers[-1].vc = world.nlp
    fillers[-1].owner = world.outsider
    fillers[-1].save()
    job_manager.run()
    placed = {Job.objects.get(pk=filler.pk).placement[0]["node"] for filler in fillers}
    assert failing in placed
    assert len(smtp.to(ADMIN)) == 1


def test_with_prometheus_stopped_nothing_is_cordoned_and_an_alert_says_so(
    world,
    repair_settings,
    smtp,
    tmp_path,
    stop_at_end,
):
    agents = start_agents(tmp_path, ["a100-1"], gpus=8)
    stop_at_end.extend(agents)
    prometheus = start_prometheus(tmp_path / "prometheus", [agents[0].target])
    repair_settings.TRAINYARD_PROMETHEUS_URL = prometheus.url
    repair_settings.TRAINYARD_REPAIR_MAX_OUT_SHARE = 1.0
    wait_until(lambda: prometheus.sees("count(DCGM_FI_DEV_GPU_TEMP)", 8), 30, "GPUs scraped")
    run_repair_manager()
    assert NodeFault.objects.count() == 0  # all healthy

    prometheus.stop()
    # A node silent for 10 minutes would be taken out, if the repair manager could see.
    Node.objects.filter(name="a100-2").update(last_heartbeat=timezone.now() - timedelta(minutes=10))
    for _ in range(3):
        summary = run_repair_manager()
        assert "Prometheus at" in summary.blind
    assert set(Node.objects.values_list("repair_state", flat=True)) == {RepairState.IN_SERVICE}
    assert Node.objects.filter(schedulable=False).count() == 0
    silent = NodeFault.objects.get(rule="no-heartbeat")
    assert silent.outcome.startswith("held back, the node stays in service: Prometheus is")
    wait_until(lambda: len(smtp.to(ADMIN)) >= 2, 10, "the alerts")
    subjects = sorted(message["Subject"] for message in smtp.to(ADMIN))
    assert len(subjects) == 2
    assert "Prometheus unavailable" in subjects[0]
    assert "a100-2: no heartbeat for 2 minutes" in subjects[1]


def test_faults_on_5_of_10_nodes_take_out_only_the_allowed_share(
    repair_settings,
    smtp,
    tmp_path,
    stop_at_end,
):
    UserFactory(username="root", is_staff=True)
    h100 = GpuTypeFactory(name="H100")
    names = [f"gpu-{index:02}" for index in range(10)]
    for name in names:
        NodeFactory(name=name, gpu_type=h100, gpus=2)
    agents = {a.node: a for a in start_agents(tmp_path, names, gpus=2)}
    stop_at_end.extend(agents.values())
    prometheus = start_prometheus(tmp_path / "prometheus", [a.target for a in agents.values()])
    stop_at_end.append(prometheus)
    repair_settings.TRAINYARD_PROMETHEUS_URL = prometheus.url
    wait_until(lambda: prometheus.sees("count(DCGM_FI_DEV_GPU_TEMP)", 20), 30, "GPUs scraped")

    faulty = names[1::2]
    for name in faulty:
        agents[name].inject({"gpus": {"1": {"DCGM_FI_DEV_ROW_REMAP_FAILURE": 1}}})
    wait_until(
        lambda: prometheus.sees("count(DCGM_FI_DEV_ROW_REMAP_FAILURE > 0)", 5), 10, "faults seen"
    )
    run_repair_manager()
    run_repair_manager()

    out_of_service = Node.objects.exclude(repair_state=RepairState.IN_SERVICE)
    out = list(out_of_service.values_list("name", flat=True))
    assert len(out) == 1 and out[0] in faulty
    faults = NodeFault.objects.filter(rule="row-remap-failure")
    assert sorted(faults.values_list("node__name", flat=True)) == faulty
    held = [fault for fault in faults if fault.outcome.startswith("held back")]
    assert len(held) == 4
    assert all("safety valve: 1 of 10 nodes already out" in fault.outcome for fault in held)
    wait_until(lambda: len(smtp.to(ADMIN)) >= 5, 10, "one alert per fault")
    reported = sorted(message["Subject"] for message in smtp.to(ADMIN))
    assert len(reported) == 5
    assert all("row-remap failure on GPU 1" in subject for subject in reported)
