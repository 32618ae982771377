"""Storage runs' status machine (scans and expiry runs): which changes are allowed, and the
one place that makes them.

A run starts ``running`` and ends once, ``done`` or ``failed``: ``finish`` checks the
change against ``ALLOWED`` and writes it in one conditional UPDATE (so that a run the
abandoned-scan sweep has failed meanwhile is not finished twice); ``fail_abandoned_scans``
is the sweep. A change the table does not allow raises ``ForbiddenRunTransition`` and
writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from django.utils import timezone

from backend.core.exceptions import ActionRefused
from backend.storage.models import ExpiryRun, RunStatus, Scan, StorageRoot

R = RunStatus
ALLOWED: dict[str, frozenset[str]] = {
    R.RUNNING: frozenset({R.DONE, R.FAILED}),
    R.DONE: frozenset(),
    R.FAILED: frozenset(),
}
# What an expiry run counts as it goes, written with its end.
EXPIRY_COUNTS = (
    "expired_files", "expired_bytes", "deleted_files", "deleted_bytes", "deleted_directories",
    "skipped", "warned_users",
)  # fmt: skip

StorageRun = TypeVar("StorageRun", Scan, ExpiryRun)


class ForbiddenRunTransition(ActionRefused):
    """A status change of a storage run the table does not allow."""


def start_scan(root: StorageRoot) -> Scan:
    """A new scan of the root, running."""
    return Scan.objects.create(root=root, status=RunStatus.RUNNING)


def start_expiry_run(root: StorageRoot, dry_run: bool, expire_before: datetime) -> ExpiryRun:
    """A new expiry run (or dry run) of the root, running."""
    return ExpiryRun.objects.create(
        root=root, dry_run=dry_run, expire_before=expire_before, status=RunStatus.RUNNING
    )


def finish(run: StorageRun, to_status: str, **fields: object) -> StorageRun:
    """End the run: ``to_status`` with ``fields`` written (``finished_at`` now unless
    given) and set on ``run``. Raises ForbiddenRunTransition, writing nothing, unless the
    stored run may go there (a run ends once)."""
    sources = _sources_of(to_status)
    fields.setdefault("finished_at", timezone.now())
    model = type(run)
    if not model.objects.filter(pk=run.pk, status__in=sources).update(status=to_status, **fields):
        stored = model.objects.filter(pk=run.pk).values_list("status", flat=True).first()
        raise ForbiddenRunTransition(
            f"{'Scan' if isinstance(run, Scan) else 'Expiry run'} {run.pk} cannot go from "
            f"{stored or 'nowhere'} to {to_status}."
        )
    run.status = to_status
    for name, value in fields.items():
        setattr(run, name, value)
    return run


def fail_abandoned_scans(started_before: datetime, now: datetime | None = None) -> int:
    """Fail the scans still running that started before ``started_before``: their worker
    stopped. Returns how many."""
    abandoned = Scan.objects.filter(
        status__in=_sources_of(RunStatus.FAILED) & {RunStatus.RUNNING},
        started_at__lt=started_before,
    )
    return abandoned.update(
        status=RunStatus.FAILED,
        finished_at=now or timezone.now(),
        error="abandoned: its worker stopped",
    )


def _sources_of(to_status: str) -> set[str]:
    """The statuses the table lets a run leave for ``to_status``."""
    return {status for status, targets in ALLOWED.items() if to_status in targets}
