"""Background work on accounts: the allowlist reconcile that beat runs."""

from __future__ import annotations

from celery import shared_task

from backend.accounts import allowlist


@shared_task(ignore_result=True)
def reconcile_allowlist() -> dict:
    result = allowlist.reconcile()
    return {"expired": result.expired, "failed": result.failed}
