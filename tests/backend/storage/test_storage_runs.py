"""Storage runs' status machine: a scan or expiry run ends once, done or failed, through
``backend/storage/runs.py``; a change the table forbids is refused and writes nothing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from backend.storage import actions, runs
from backend.storage.models import ExpiryRun, RunStatus, Scan, StorageRoot, Usage
from backend.storage.runs import ALLOWED, ForbiddenRunTransition
from tests.storagemanager.trees import make_files

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path) -> StorageRoot:
    make_files(tmp_path / "shared" / "data", 2, size=1_000)
    return StorageRoot.objects.create(name="shared", path=str(tmp_path / "shared"))


def test_every_status_has_its_row_and_the_ends_lead_nowhere():
    assert set(ALLOWED) == set(RunStatus.values)
    assert ALLOWED[RunStatus.RUNNING] == {RunStatus.DONE, RunStatus.FAILED}
    assert ALLOWED[RunStatus.DONE] == ALLOWED[RunStatus.FAILED] == frozenset()


def test_a_run_ends_once_and_a_second_end_writes_nothing(root):
    run = runs.start_expiry_run(root, dry_run=True, expire_before=timezone.now())

    runs.finish(run, RunStatus.DONE, expired_files=3)
    with pytest.raises(ForbiddenRunTransition, match="cannot go from done to failed"):
        runs.finish(run, RunStatus.FAILED, error="late")

    stored = ExpiryRun.objects.get(pk=run.pk)
    assert (stored.status, stored.expired_files, stored.error) == (RunStatus.DONE, 3, "")
    assert stored.finished_at is not None


def test_only_scans_running_past_the_limit_are_failed_as_abandoned(root):
    old, fresh = runs.start_scan(root), runs.start_scan(root)
    Scan.objects.filter(pk=old.pk).update(started_at=timezone.now() - timedelta(hours=25))
    done = runs.finish(runs.start_scan(root), RunStatus.DONE)
    Scan.objects.filter(pk=done.pk).update(started_at=timezone.now() - timedelta(hours=25))

    assert runs.fail_abandoned_scans(started_before=timezone.now() - timedelta(hours=24)) == 1

    statuses = dict(Scan.objects.values_list("pk", "status"))
    assert statuses == {old.pk: RunStatus.FAILED, fresh.pk: RunStatus.RUNNING,
                        done.pk: RunStatus.DONE}  # fmt: skip


def test_a_scan_failed_as_abandoned_while_it_walked_stays_failed(root, monkeypatch):
    walk = actions.scan_root

    def walk_then_swept(*args, **kwargs):
        result = walk(*args, **kwargs)  # the real walk, then the beat's sweep meanwhile
        runs.fail_abandoned_scans(started_before=timezone.now() + timedelta(seconds=1))
        return result

    monkeypatch.setattr(actions, "scan_root", walk_then_swept)

    record = actions.scan(root)

    assert (record.status, record.error) == (RunStatus.FAILED, "abandoned: its worker stopped")
    assert not Usage.objects.filter(scan=record).exists()


def test_a_scan_and_an_expiry_pass_end_done_through_the_writer(root):
    root.expiry_days = 30
    root.save()

    scan = actions.scan(root)
    expiry = actions.run_expiry(root, dry_run=True)

    assert (scan.status, scan.files_seen) == (RunStatus.DONE, 2)
    assert Scan.objects.get(pk=scan.pk).status == RunStatus.DONE
    assert ExpiryRun.objects.get(pk=expiry.pk).status == RunStatus.DONE
