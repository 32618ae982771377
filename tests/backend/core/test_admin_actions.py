"""The Django admin writes only through the apps' actions: a cluster admin's change there
is checked, recorded and followed as the API's is, a refusal is shown and changes
nothing, and what has no action (a status, a scan, an event) is shown only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.forms import MultiWidget
from django.test import Client

from backend.accounts.actions import add_allowed_ip, create_api_token
from backend.accounts.models import (
    AllowedIp,
    AllowedIpEvent,
    AllowedIpEventKind,
    ApiToken,
    SshKey,
)
from backend.clusters.models import GpuType, Node, RepairState
from backend.core.admin import ActionAdmin, ReadOnlyAdmin
from backend.jobs.models import Job, JobEvent, JobStatus
from backend.storage.models import (
    ExpiryRun,
    RunStatus,
    Scan,
    StorageAccount,
    StorageRoot,
)
from backend.vcs.models import Membership, Quota, VirtualCluster
from tests.backend.jobs_support import make_job
from tests.storagemanager.trees import make_files

GIB = 1024


@pytest.fixture
def site(world) -> Client:
    """The admin site, signed in as the superuser ``root``."""
    client = Client()
    client.force_login(world.staff)
    return client


@pytest.fixture
def job_manager_runs(settings, redis_namespace, monkeypatch) -> list[int]:
    """The job manager runs asked for: each task queued is recorded, not sent."""
    from backend.jobmanager import tasks

    settings.TRAINYARD_TRIGGER_JOB_MANAGER = True
    queued: list[int] = []
    monkeypatch.setattr(tasks.run_job_manager, "apply_async", lambda *a, **k: queued.append(1))
    return queued


def change_url(obj: Any) -> str:
    return f"/admin/{obj._meta.app_label}/{obj._meta.model_name}/{obj.pk}/change/"


def list_url(model: Any) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def form_data(site: Client, url: str, **changes: Any) -> dict[str, Any]:
    """What the admin's form at ``url`` posts as it stands, with ``changes``: its fields'
    values and its inlines' management forms."""
    page = site.get(url)
    assert page.status_code == 200
    form = page.context["adminform"].form
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        if isinstance(field.widget, MultiWidget):  # a date and a time: posted apart
            parts = field.widget.decompress(form[name].value())
            data |= {f"{name}_{index}": part for index, part in enumerate(parts)}
        else:
            data[name] = form[name].value()
    for inline in page.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        prefix = management.prefix
        data |= {f"{prefix}-{name}": management[name].value() for name in management.fields}
        for row in inline.formset.forms:
            data |= {row.add_prefix(name): row[name].value() for name in row.fields}
    data |= changes
    return {name: value for name, value in data.items() if value is not None and value is not False}


def messages_of(answer: Any) -> list[str]:
    return [str(message) for message in get_messages(answer.wsgi_request)]


def run_admin_action(site: Client, model: Any, action: str, *objects: Any) -> Any:
    return site.post(
        list_url(model),
        {"action": action, "_selected_action": [obj.pk for obj in objects]},
        follow=True,
    )


# --- jobs ---------------------------------------------------------------------------------


def test_a_job_changed_in_the_admin_records_the_change_as_an_event(world, site):
    job = make_job(world, priority=0)

    answer = site.post(change_url(job), form_data(site, change_url(job), priority=5))

    assert answer.status_code == 302
    assert Job.objects.get(pk=job.pk).priority == 5
    event = JobEvent.objects.get(job=job)
    assert (event.actor_name, event.reason) == ("root", "changed: priority 0 -> 5")


def test_a_jobs_status_is_shown_but_not_written_by_the_admin(world, site):
    job = make_job(world)

    form = site.get(change_url(job)).context["adminform"].form
    site.post(change_url(job), form_data(site, change_url(job), status=JobStatus.FINISHED))

    assert set(form.fields) == {"priority", "max_wall_time", "max_retries"}
    assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUED
    assert not JobEvent.objects.filter(job=job).exists()


def test_killing_jobs_from_the_admin_moves_them_through_the_job_actions(world, site):
    queued, unapproved = make_job(world), make_job(world, status=JobStatus.UNAPPROVED)

    answer = run_admin_action(site, Job, "kill", queued, unapproved)

    assert "Killed 2 jobs." in messages_of(answer)
    for job in (queued, unapproved):
        assert Job.objects.get(pk=job.pk).status == JobStatus.KILLED
        event = JobEvent.objects.get(job=job)
        assert (event.from_status, event.to_status, event.actor_name) == (
            job.status, JobStatus.KILLED, "root"
        )  # fmt: skip


def test_an_illegal_move_from_the_admin_is_refused_with_its_reason(world, site):
    finished = make_job(world, status=JobStatus.FINISHED, exit_code=0)
    unapproved = make_job(world, status=JobStatus.UNAPPROVED)

    answer = run_admin_action(site, Job, "approve", finished, unapproved)

    assert messages_of(answer) == [
        f"Job {finished.job_id} is finished; it needs no approval.",
        "Approved 1 job.",
    ]
    assert Job.objects.get(pk=finished.pk).status == JobStatus.FINISHED
    assert not JobEvent.objects.filter(job=finished).exists()
    assert Job.objects.get(pk=unapproved.pk).status == JobStatus.QUEUED


def test_changing_an_ended_job_in_the_admin_is_refused_and_changes_nothing(world, site):
    job = make_job(world, status=JobStatus.KILLED, priority=0)

    answer = site.post(change_url(job), form_data(site, change_url(job), priority=7), follow=True)

    assert messages_of(answer) == [f"Job {job.job_id} has ended (killed): nothing to change."]
    assert Job.objects.get(pk=job.pk).priority == 0
    assert not JobEvent.objects.filter(job=job).exists()


def test_jobs_are_neither_added_nor_deleted_in_the_admin(world, site):
    job = make_job(world)

    assert site.get(f"{list_url(Job)}add/").status_code == 403
    assert site.post(f"{list_url(Job)}{job.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


# --- the cluster's inventory --------------------------------------------------------------


def test_a_node_cordoned_in_the_admin_asks_the_job_manager_for_a_pass(
    world, site, job_manager_runs, django_capture_on_commit_callbacks
):
    node = world.nodes[0]
    data = form_data(site, change_url(node))
    del data["schedulable"]  # an unticked box is not posted

    with django_capture_on_commit_callbacks(execute=True):
        site.post(change_url(node), data)

    assert Node.objects.get(pk=node.pk).schedulable is False
    assert job_manager_runs == [1]


def test_a_nodes_readiness_and_repair_state_are_shown_but_not_written(world, site):
    node = world.nodes[0]

    form = site.get(change_url(node)).context["adminform"].form
    site.post(change_url(node), form_data(site, change_url(node), repair_state="failed"))

    assert not {"ready", "ready_reason", "repair_state"} & set(form.fields)
    stored = Node.objects.get(pk=node.pk)
    assert (stored.ready, stored.repair_state) == (True, RepairState.IN_SERVICE)


def test_a_node_with_a_running_job_deleted_in_the_admin_is_drained_not_deleted(
    world, site, settings
):
    settings.TRAINYARD_BACKEND = "memory"  # its registered nodes are its inventory
    node = world.nodes[0]
    make_job(
        world, status=JobStatus.RUNNING,
        placement=[{"node": node.name, "gpus": [0], "cpus": 4, "memory": GIB}],
    )  # fmt: skip

    answer = site.post(f"{change_url(node)[:-7]}delete/", {"post": "yes"}, follow=True)

    assert messages_of(answer) == [
        f"Jobs run on {node.name}: it is cordoned and drained, and goes once they end."
    ]
    stored = Node.objects.get(pk=node.pk)
    assert stored.schedulable is False and stored.removal_requested_at is not None


def test_a_node_removal_the_backend_refuses_is_shown_and_changes_nothing(world, site, settings):
    settings.TRAINYARD_BACKEND = "kubernetes"
    node = world.nodes[0]

    answer = site.post(f"{change_url(node)[:-7]}delete/", {"post": "yes"}, follow=True)

    assert any("kubectl delete node" in message for message in messages_of(answer))
    assert Node.objects.filter(pk=node.pk, schedulable=True).exists()


def test_a_gpu_type_added_in_the_admin_is_made_by_the_cluster_action(world, site):
    data = form_data(site, f"{list_url(GpuType)}add/", name="h100", cpus_per_gpu="12",
                     memory_per_gpu=122880)  # fmt: skip

    assert site.post(f"{list_url(GpuType)}add/", data).status_code == 302

    made = GpuType.objects.get(name="h100")
    assert (str(made.cpus_per_gpu), made.memory_per_gpu) == ("12.000", 122880)
    assert site.post(f"{change_url(made)[:-7]}delete/", {"post": "yes"}).status_code == 403


# --- virtual clusters and accounts -------------------------------------------------------


def test_a_vcs_quota_and_members_change_in_the_admin_through_the_vc_actions(world, site):
    url = change_url(world.vision)
    member = Membership.objects.get(vc=world.vision, user=world.member)
    data = form_data(site, url, user_gpu_limit=4)
    rows = {data[f"memberships-{i}-id"]: i for i in range(len(world.vision.memberships.all()))}
    data |= {"quotas-0-gpus": 24, f"memberships-{rows[member.pk]}-DELETE": "on"}

    assert site.post(url, data).status_code == 302

    assert VirtualCluster.objects.get(pk=world.vision.pk).user_gpu_limit == 4
    assert Quota.objects.get(vc=world.vision, gpu_type=world.a100).gpus == 24
    assert not Membership.objects.filter(pk=member.pk).exists()
    assert Membership.objects.filter(vc=world.vision, user=world.vc_admin).exists()


def test_a_bad_ssh_key_added_in_the_admin_is_refused_as_the_api_refuses_it(world, site):
    url = f"{list_url(SshKey)}add/"
    data = form_data(site, url, user=world.member.pk, name="laptop", public_key="ssh-rsa nope")

    answer = site.post(url, data, follow=True)

    assert any("key" in message.lower() for message in messages_of(answer))
    assert not SshKey.objects.exists()


def test_a_user_deactivated_in_the_admin_loses_their_tokens(world, site):
    create_api_token(world.member, "ci")

    site.post(change_url(world.member), form_data(site, change_url(world.member), is_active=""))

    assert not User.objects.get(pk=world.member.pk).is_active
    assert not ApiToken.objects.filter(user=world.member).exists()


def test_an_allowed_network_removed_in_the_admin_leaves_its_event(world, site):
    allowed = add_allowed_ip(world.member, "10.1.2.3")

    site.post(f"{change_url(allowed)[:-7]}delete/", {"post": "yes"})

    assert not AllowedIp.objects.filter(pk=allowed.pk).exists()
    assert list(AllowedIpEvent.objects.values_list("network", "kind")) == [
        ("10.1.2.3/32", AllowedIpEventKind.REMOVED), ("10.1.2.3/32", AllowedIpEventKind.ADDED)
    ]  # fmt: skip


# --- storage ------------------------------------------------------------------------------


def test_storage_roots_and_accounts_are_written_through_the_storage_actions(world, site, tmp_path):
    add_root = f"{list_url(StorageRoot)}add/"
    data = form_data(site, add_root, name="scratch", path=str(tmp_path), kind="nfs")
    assert site.post(add_root, data).status_code == 302
    root = StorageRoot.objects.get(name="scratch")

    site.post(change_url(root), form_data(site, change_url(root), expiry_days=30))
    add_account = f"{list_url(StorageAccount)}add/"
    site.post(add_account, form_data(site, add_account, user=world.member.pk, uid=4242))

    assert StorageRoot.objects.get(pk=root.pk).expiry_days == 30
    assert StorageAccount.objects.get(user=world.member).uid == 4242


def test_scans_and_dry_runs_asked_for_in_the_admin_run_through_the_storage_actions(
    world, site, tmp_path, django_capture_on_commit_callbacks
):
    import backend.storage.tasks  # noqa: F401  (a worker knows the tasks by their names)
    from backend.celery import app

    make_files(tmp_path / "data", 2, size=1_000)
    aged = StorageRoot.objects.create(name="aged", path=str(tmp_path), expiry_days=30)
    no_policy = StorageRoot.objects.create(name="kept", path=str(tmp_path / "data"))
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            scanned = run_admin_action(site, StorageRoot, "scan_now", aged)
        with django_capture_on_commit_callbacks(execute=True):
            listed = run_admin_action(site, StorageRoot, "expiry_dry_run", aged, no_policy)
    finally:
        app.conf.task_always_eager = False

    assert messages_of(scanned) == ["Queued a scan of 1 storage root."]
    assert messages_of(listed) == [
        "Storage root kept has no expiry policy.",
        "Queued an expiry dry run of 1 storage root.",
    ]
    assert list(Scan.objects.values_list("root__name", "status", "files_seen")) == [
        ("aged", RunStatus.DONE, 2)
    ]
    assert list(ExpiryRun.objects.values_list("root__name", "dry_run", "status")) == [
        ("aged", True, RunStatus.DONE)
    ]


def test_scans_are_shown_only(world, site, tmp_path):
    root = StorageRoot.objects.create(name="scratch", path=str(tmp_path))
    scan = Scan.objects.create(root=root)

    assert site.get(change_url(scan)).status_code == 200
    assert site.post(change_url(scan), {"status": RunStatus.DONE}).status_code == 403
    assert site.get(f"{list_url(Scan)}add/").status_code == 403
    assert Scan.objects.get(pk=scan.pk).status == RunStatus.RUNNING


def test_every_admin_writes_through_actions_or_only_shows():
    # Django's user admin (deactivation goes through deactivate_user, deletion is off) and
    # group admin, and axes' lockout records: Django's and axes' models, with no action.
    outside = {"auth.User", "auth.Group", "axes.AccessAttempt", "axes.AccessLog",
               "axes.AccessFailureLog"}  # fmt: skip
    bypassing = sorted(
        model._meta.label
        for model, model_admin in admin.site._registry.items()
        if model._meta.label not in outside
        and not isinstance(model_admin, (ActionAdmin, ReadOnlyAdmin))
    )

    assert bypassing == []


def test_every_admin_page_opens_for_a_superuser(world, site):
    make_job(world)
    for model, model_admin in admin.site._registry.items():
        assert site.get(list_url(model)).status_code == 200, model
        request = site.get(list_url(model)).wsgi_request
        adds = model_admin.has_add_permission(request)
        assert site.get(f"{list_url(model)}add/").status_code == (200 if adds else 403), model
        first = model.objects.first()
        if first is not None:
            assert site.get(change_url(first)).status_code == 200, model
