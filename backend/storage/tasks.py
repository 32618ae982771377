"""The storage manager's background work: scans when they are due, expiry once a day,
Lustre quotas; beat runs the dispatchers, workers run one root at a time."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.db.models import Max
from django.utils import timezone

from backend.storage import actions, runs
from backend.storage.models import ExpiryRun, RootKind, RunStatus, Scan, StorageRoot

EXPIRY_EVERY = timedelta(days=1)
# A scan still "running" after this long lost its worker: it is marked failed, and the
# root is scanned again.
ABANDONED_AFTER = timedelta(hours=24)


@shared_task(ignore_result=True)
def queue_due_scans() -> list[int]:
    """Queue a scan of every root whose last scan started longer ago than its interval
    (and that has none running)."""
    now = timezone.now()
    runs.fail_abandoned_scans(started_before=now - ABANDONED_AFTER, now=now)
    last = dict(Scan.objects.values("root_id").annotate(at=Max("started_at")).values_list(
        "root_id", "at"))  # fmt: skip
    running = set(Scan.objects.filter(status=RunStatus.RUNNING).values_list("root_id", flat=True))
    due = [
        root.pk
        for root in StorageRoot.objects.all()
        if root.pk not in running
        and (
            root.pk not in last
            or now - last[root.pk] >= timedelta(minutes=root.scan_interval_minutes)
        )
    ]
    for root_pk in due:
        scan_root.delay(root_pk)
    return due


@shared_task(ignore_result=True)
def scan_root(root_pk: int) -> int | None:
    root = StorageRoot.objects.filter(pk=root_pk).first()
    return actions.scan(root).pk if root else None


@shared_task(ignore_result=True)
def queue_due_expiry() -> list[int]:
    """Queue the daily expiry pass of every root with a policy."""
    since = timezone.now() - EXPIRY_EVERY
    recent = set(
        ExpiryRun.objects.filter(dry_run=False, started_at__gte=since).values_list(
            "root_id", flat=True
        )
    )
    due = [
        root.pk
        for root in StorageRoot.objects.filter(expiry_days__isnull=False)
        if root.pk not in recent
    ]
    for root_pk in due:
        expire_root.delay(root_pk, dry_run=False)
    return due


@shared_task(ignore_result=True)
def expire_root(root_pk: int, dry_run: bool) -> int | None:
    root = StorageRoot.objects.filter(pk=root_pk, expiry_days__isnull=False).first()
    return actions.run_expiry(root, dry_run).pk if root else None


@shared_task(ignore_result=True)
def apply_lustre_quotas() -> int:
    return sum(
        actions.apply_lustre_settings(root)
        for root in StorageRoot.objects.filter(kind=RootKind.LUSTRE)
    )
