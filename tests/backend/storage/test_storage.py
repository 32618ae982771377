"""The storage manager end to end on real trees: scans stored as dated snapshots and read
through the API by each role (and as CSV), expiry dry runs and deletions, owners' warning
emails and the admins' alert at a real SMTP server, Lustre quotas through stand-in tools."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from backend.storage import actions
from backend.storage.models import LustrePool, RunStatus, Scan, StorageAccount, StorageRoot
from tests.storagemanager.trees import cut_off, make_files

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(os.geteuid() != 0, reason="files owned by several uids need root"),
]
pytest_plugins = ["tests.smtp"]

UIDS = {"member": 5001, "vc_admin": 5002, "outsider": 5003}
USAGE = "/api/v1/storage/usage/"
STAND_INS = Path(__file__).parents[2] / "storagemanager" / "bin"


def owned(paths: list[str], uid: int) -> list[str]:
    for path in paths:
        os.chown(path, uid, -1)
    return paths


@pytest.fixture
def root(world, tmp_path: Path) -> StorageRoot:
    """vcs/vision holds the member's and the VC admin's files, vcs/nlp the outsider's, and
    home/ the member's again; uid 5009 belongs to nobody on Trainyard."""
    for name, uid in UIDS.items():
        StorageAccount.objects.create(user=getattr(world, name), uid=uid)
    tree = tmp_path / "shared"
    owned(make_files(tree / "vcs" / "vision" / "member", 3, size=40_000), UIDS["member"])
    owned(make_files(tree / "vcs" / "vision" / "admin", 1, size=10_000), UIDS["vc_admin"])
    owned(make_files(tree / "vcs" / "nlp" / "outsider", 2, size=90_000), UIDS["outsider"])
    owned(make_files(tree / "home" / "member", 1, size=5_000), UIDS["member"])
    owned(make_files(tree / "scratch", 1, size=1_000), 5009)
    return StorageRoot.objects.create(name="shared", path=str(tree), vc_directory="vcs")


def usage_keys(client, **params) -> set[tuple[str, str]]:
    response = client.get(USAGE, params)
    assert response.status_code == 200, response.content
    return {(row["kind"], row["key"]) for row in response.json()["results"]}


def test_a_scan_is_a_dated_snapshot_each_role_sees_its_share_of(world, root):
    scan = actions.scan(root)

    assert scan.status == RunStatus.DONE and scan.files_seen == 8
    member, admin, outsider = (world.member.username, world.vc_admin.username,
                               world.outsider.username)  # fmt: skip
    everything = usage_keys(world.client(world.staff))
    assert everything == {
        ("user", member), ("user", admin), ("user", outsider), ("user", "uid:5009"),
        ("vc", "vision"), ("vc", "nlp"), ("vc_user", f"vision/{member}"),
        ("vc_user", f"vision/{admin}"), ("vc_user", f"nlp/{outsider}"),
        ("directory", "vcs"), ("directory", "home"), ("directory", "scratch"),
        # The directories the test made belong to uid 0, whose system name "root" is also
        # the staff user's username: that maps them to the staff user.
        ("user", "root"), ("vc_user", "vision/root"), ("vc_user", "nlp/root"),
    }  # fmt: skip
    assert usage_keys(world.client(world.member)) == {
        ("user", member),
        ("vc_user", f"vision/{member}"),
    }
    assert usage_keys(world.client(world.vc_admin)) == {
        ("user", admin), ("vc", "vision"), ("vc_user", f"vision/{member}"),
        ("vc_user", f"vision/{admin}"), ("vc_user", "vision/root"),
    }  # fmt: skip
    assert usage_keys(world.client(world.outsider), kind="user") == {("user", outsider)}
    row = world.client(world.member).get(USAGE, {"kind": "user"}).json()["results"][0]
    assert row["files"] == 4 and row["apparent_bytes"] == 3 * 40_000 + 5_000
    assert row["snapshot_at"] == scan.finished_at.isoformat().replace("+00:00", "Z")
    largest = world.client(world.outsider).get("/api/v1/storage/largest-paths/").json()
    assert {item["path"] for item in largest["results"]} == {
        "vcs/nlp/outsider/f000000",
        "vcs/nlp/outsider/f000001",
    }


def test_usage_answers_the_newest_snapshot_and_exports_as_csv(world, root):
    actions.scan(root)
    owned(make_files(Path(root.path) / "home" / "member", 2, size=7_000, stem="g"), 5001)
    newest = actions.scan(root)

    response = world.client(world.member).get(f"{USAGE}export/", {"kind": "user"})

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(row["kind"], row["user"], row["files"]) for row in rows] == [
        ("user", world.member.username, "6")
    ]
    assert datetime.fromisoformat(rows[0]["snapshot_at"]) == newest.finished_at


def test_a_csv_export_never_starts_a_cell_with_a_formula(world, root):
    # A user names a directory so that a spreadsheet would run it as a formula.
    for name in ('=HYPERLINK("evil")', "+cmd", "-2+3", "@SUM(A1)"):
        make_files(Path(root.path) / name, 1, size=100)
    actions.scan(root)

    response = world.client(world.staff).get(f"{USAGE}export/", {"kind": "directory"})

    keys = {row["key"] for row in csv.DictReader(io.StringIO(response.content.decode()))}
    assert {'\'=HYPERLINK("evil")', "'+cmd", "'-2+3", "'@SUM(A1)", "vcs"} <= keys
    assert not any(key.startswith(("=", "+", "-", "@")) for key in keys)


@pytest.mark.parametrize("scan", ["9223372036854775808", "1.5", "0"])
def test_a_scan_id_that_cannot_be_one_is_a_400_naming_it(world, scan):
    response = world.client(world.staff).get(USAGE, {"scan": scan})

    assert response.status_code == 400
    assert "scan" in response.json()


def test_progress_is_visible_in_the_api_while_a_scan_runs(world, root, settings):
    settings.TRAINYARD_STORAGE_PROGRESS_FILES = 3
    seen: list[dict] = []
    real_update = Scan.objects.filter

    def watch(*args, **kwargs):
        # Each progress write is followed by a look through the API, as a user would.
        found = real_update(*args, **kwargs)
        if "pk" in kwargs and Scan.objects.get(pk=kwargs["pk"]).status == RunStatus.RUNNING:
            seen.append(world.client(world.member).get("/api/v1/storage/scans/").json())
        return found

    Scan.objects.filter = watch  # type: ignore[method-assign]
    try:
        actions.scan(root)
    finally:
        Scan.objects.filter = real_update  # type: ignore[method-assign]

    running = [page["results"][0] for page in seen if page["results"][0]["status"] == "running"]
    assert running and running[0]["files_seen"] == 0
    assert any(item["files_seen"] >= 3 for item in running)


@pytest.fixture
def aged_root(world, tmp_path: Path) -> tuple[StorageRoot, datetime, dict[str, set[str]]]:
    """Files made before a cut-off T (expired when "now" is T + 30 days) and after it
    (expiring within the 7 warning days then)."""
    for name, uid in UIDS.items():
        StorageAccount.objects.create(user=getattr(world, name), uid=uid)
    tree = tmp_path / "scratch"
    expired = set(owned(make_files(tree / "vcs" / "vision" / "member", 3, old=True), 5001))
    expired |= set(owned(make_files(tree / "vcs" / "nlp" / "out", 2, old=True), 5003))
    kept = set(make_files(tree / "datasets", 2, old=True))
    cut = cut_off(tmp_path)
    soon = set(owned(make_files(tree / "vcs" / "vision" / "member", 2, stem="new"), 5001))
    root = StorageRoot.objects.create(
        name="scratch", path=str(tree), vc_directory="vcs", expiry_days=30, warn_days=7,
        never_expire="datasets", delete_rate=0,
    )  # fmt: skip
    now = datetime.fromtimestamp(cut, UTC) + timedelta(days=30)
    return root, now, {"expired": expired, "kept": kept | soon, "soon": soon}


def test_a_dry_run_reports_per_owner_and_deletes_nothing(world, aged_root):
    root, now, files = aged_root

    run = actions.run_expiry(root, dry_run=True, now=now)

    assert run.status == RunStatus.DONE and run.expired_files == 5
    assert all(os.path.exists(path) for path in files["expired"])
    mine = world.client(world.member).get("/api/v1/storage/expiring-files/").json()["results"]
    assert {(item["path"], item["expired"]) for item in mine} == {
        *((f"vcs/vision/member/f00000{i}", True) for i in range(3)),
        *((f"vcs/vision/member/new00000{i}", False) for i in range(2)),
    }
    everyone = world.client(world.staff).get("/api/v1/storage/expiring-files/").json()
    assert everyone["count"] == 7  # never the protected datasets/


def test_expiry_warns_owners_by_email_then_deletes_only_expired_files(world, aged_root, smtp):
    root, now, files = aged_root

    run = actions.run_expiry(root, dry_run=False, now=now)

    assert run.deleted_files == 5 and run.warned_users == 1
    assert not any(os.path.exists(path) for path in files["expired"])
    assert all(os.path.exists(path) for path in files["kept"])
    [warning] = smtp.wait_for(1)
    assert warning["To"] == world.member.email
    assert "2 of your files on scratch" in warning["Subject"]
    assert "vcs/vision/member/new000000" in warning.get_payload()
    # The next day's run does not warn again within the warning period.
    again = actions.run_expiry(root, dry_run=False, now=now)
    assert again.warned_users == 0 and len(smtp.messages) == 1


def test_admins_get_one_alert_with_the_biggest_users_and_paths(world, root, smtp):
    root.alert_threshold_bytes = 100_000
    root.save()

    actions.scan(root)
    actions.scan(root)  # still over: no second email

    [alert] = smtp.wait_for(1)
    assert alert["X-Rcpt-To"] == world.staff.email
    body = alert.get_payload()
    assert "Storage root shared" in body and "outsider" in body
    assert "vcs/nlp/outsider/f000000" in body
    assert len(smtp.messages) == 1
    root.refresh_from_db()
    assert root.alerted_at is not None
    root.alert_threshold_bytes = 10**12
    root.save()
    actions.scan(root)
    root.refresh_from_db()
    assert root.alerted_at is None  # back under: the next crossing alerts again


def test_lustre_quotas_and_pools_go_through_lfs_and_lctl(world, settings, tmp_path, monkeypatch):
    log = tmp_path / "lustre.log"
    monkeypatch.setenv("LUSTRE_STANDIN_LOG", str(log))
    monkeypatch.setenv("LUSTRE_STANDIN_STATE", str(tmp_path / "pools.json"))
    settings.TRAINYARD_LFS_COMMAND = str(STAND_INS / "lfs")
    settings.TRAINYARD_LCTL_COMMAND = str(STAND_INS / "lctl")
    StorageAccount.objects.create(user=world.member, uid=5001)
    root = StorageRoot.objects.create(
        name="lustre", path="/mnt/lustre", kind="lustre", lustre_fsname="lfs1",
        vc_directory="vcs", quota_block_soft_gib=900, quota_block_hard_gib=1000,
        quota_inode_hard=1_000_000, quota_block_grace_seconds=86400,
    )  # fmt: skip
    LustrePool.objects.create(root=root, vc=world.vision, name="vision", osts="lfs1-OST[0-1]")

    actions.apply_lustre_settings(root)

    commands = [json.loads(line)[1:] for line in log.read_text().splitlines()]
    assert commands == [
        ["setquota", "-t", "-u", "-b", "86400", "-i", "604800", "/mnt/lustre"],
        ["setquota", "-u", "5001", "-b", f"{900 * 1024**2}k", "-B", f"{1000 * 1024**2}k",
         "-i", "0", "-I", "1000000", "/mnt/lustre"],
        ["pool_list", "lfs1"],
        ["pool_new", "lfs1.vision"],
        ["pool_add", "lfs1.vision", "lfs1-OST[0-1]"],
        ["setstripe", "--pool", "vision", "/mnt/lustre/vcs/vision"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a", "path": "relative/dir"}, "path"),
        ({"name": "a", "path": "/data/../etc"}, "path"),
        ({"name": "a", "path": "/data", "vc_directory": "../x"}, "vc_directory"),
        ({"name": "a", "path": "/data", "alert_threshold_percent": 150},
         "alert_threshold_percent"),
        ({"name": "a", "path": "/data", "quota_block_soft_gib": 5, "quota_block_hard_gib": 2},
         "quota_block_soft_gib"),
        ({"name": "a", "path": "/data", "kind": "tape"}, "kind"),
    ],
)  # fmt: skip
def test_bad_roots_are_refused_with_the_field_at_fault(world, body, field):
    response = world.client(world.staff).post("/api/v1/storage/roots/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()


def test_only_cluster_admins_configure_roots(world):
    body = {"name": "projects", "path": "/srv/projects", "expiry_days": 90}

    refused = world.client(world.vc_admin).post("/api/v1/storage/roots/", body, format="json")
    created = world.client(world.staff).post("/api/v1/storage/roots/", body, format="json")

    assert refused.status_code == 403 and created.status_code == 201
    listed = world.client(world.member).get("/api/v1/storage/roots/").json()
    assert [root["name"] for root in listed] == ["projects"]


def test_beat_queues_the_scans_that_are_due_and_retries_an_abandoned_one(world, root, monkeypatch):
    from backend.storage import tasks

    queued: list[int] = []
    monkeypatch.setattr(tasks.scan_root, "delay", queued.append)
    fresh = StorageRoot.objects.create(name="fresh", path="/srv/fresh", scan_interval_minutes=60)
    Scan.objects.create(
        root=fresh, status=RunStatus.DONE, started_at=timezone.now() - timedelta(minutes=5)
    )
    stuck = Scan.objects.create(root=root, started_at=timezone.now() - timedelta(days=2))

    tasks.queue_due_scans()

    assert queued == [root.pk]  # never scanned since the stuck one; fresh is not due
    stuck.refresh_from_db()
    assert stuck.status == RunStatus.FAILED and "abandoned" in stuck.error


@pytest.fixture
def tasks_run_in_process():
    """Tasks asked for run at once in this process (a worker imports the tasks modules
    and so knows each task by its name; here the import does that)."""
    import backend.storage.tasks  # noqa: F401
    from backend.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_a_scan_asked_for_runs_once_the_request_commits(
    world, root, tasks_run_in_process, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = world.client(world.staff).post(f"/api/v1/storage/roots/{root.name}/scan/")
        assert not Scan.objects.exists()  # queued on commit, not before

    assert response.status_code == 202
    assert response.json() == {"detail": "Scan of shared queued."}
    scans = world.client(world.member).get("/api/v1/storage/scans/").json()["results"]
    assert [(scan["root"], scan["status"], scan["files_seen"]) for scan in scans] == [
        ("shared", "done", 8)
    ]


def test_only_cluster_admins_ask_for_scans_and_dry_runs(
    world, root, tasks_run_in_process, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as queued:
        scan = world.client(world.vc_admin).post(f"/api/v1/storage/roots/{root.name}/scan/")
        dry_run = world.client(world.member).post(
            f"/api/v1/storage/roots/{root.name}/expiry-dry-run/"
        )

    assert (scan.status_code, dry_run.status_code) == (403, 403)
    assert scan.json()["detail"] == "Only cluster admins can change storage roots."
    assert queued == [] and not Scan.objects.exists()


def test_a_dry_run_of_a_root_without_a_policy_is_refused(world, root):
    response = world.client(world.staff).post(f"/api/v1/storage/roots/{root.name}/expiry-dry-run/")

    assert response.status_code == 400
    assert response.json() == {"expiry_days": ["This root has no expiry policy."]}


def test_cluster_admins_change_and_remove_roots(world, root):
    admin = world.client(world.staff)

    changed = admin.patch(f"/api/v1/storage/roots/{root.name}/", {"expiry_days": 30}, format="json")
    removed = admin.delete(f"/api/v1/storage/roots/{root.name}/")

    assert changed.status_code == 200 and changed.json()["expiry_days"] == 30
    assert removed.status_code == 204
    assert world.client(world.member).get("/api/v1/storage/roots/").json() == []
