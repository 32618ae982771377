"""What the storage manager does to roots: scan, expire (or list what would expire), warn
owners, alert cluster admins, apply Lustre quotas. The filesystem work is in the
``storagemanager`` package; this module keeps the records and sends the emails."""

from __future__ import annotations

import logging
import os
import pwd
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from backend.core import outbox
from backend.core.changes import save_changes
from backend.core.exceptions import ActionRefused
from backend.storage import runs
from backend.storage.models import (
    ExpiringFile,
    ExpiryNotice,
    ExpiryRun,
    LargestPath,
    LustrePool,
    RootKind,
    RunStatus,
    Scan,
    StorageAccount,
    StorageRoot,
    Usage,
    UsageKind,
)
from backend.vcs.models import VirtualCluster
from storagemanager import expiry, lustre
from storagemanager.scan import ScanResult, scan_root

logger = logging.getLogger(__name__)
GIB = 1024**3
DAY = 86400


def owners_by_uid(uids: Iterable[int]) -> dict[int, User]:
    """The Trainyard user of each uid: from the storage accounts, else the system account
    of that uid when a Trainyard user has its name."""
    uids = set(uids)
    owners = {
        account.uid: account.user
        for account in StorageAccount.objects.filter(uid__in=uids).select_related("user")
    }
    names: dict[str, int] = {}
    for uid in uids - owners.keys():
        try:
            names[pwd.getpwuid(uid).pw_name] = uid
        except KeyError:
            continue
    for user in User.objects.filter(username__in=names):
        owners[names[user.username]] = user
    return owners


def _owner_key(uid: int, owners: dict[int, User]) -> str:
    return owners[uid].username if uid in owners else f"uid:{uid}"


def _vcs_named(names: Iterable[str]) -> dict[str, VirtualCluster]:
    return {vc.name: vc for vc in VirtualCluster.objects.filter(name__in=set(names))}


def scan(root: StorageRoot) -> Scan:
    """Walk the root, keeping the scan's progress up to date, then store its snapshot and
    alert the cluster admins if the root is over its threshold."""
    record = runs.start_scan(root)

    def progress(files: int, size: int) -> None:
        Scan.objects.filter(pk=record.pk).update(files_seen=files, bytes_seen=size)

    vc_parent = root.vc_directory.strip("/") or None
    if vc_parent == ".":
        vc_parent = ""
    try:
        try:
            result = scan_root(
                root.path,
                vc_parent=vc_parent,
                progress=progress,
                progress_every=settings.TRAINYARD_STORAGE_PROGRESS_FILES,
            )
        except (OSError, ValueError) as error:
            runs.finish(record, RunStatus.FAILED, error=str(error))
        else:
            _store_snapshot(record, result)
    except runs.ForbiddenRunTransition as refused:
        # Failed as abandoned meanwhile, and scanned again since: its snapshot is dropped.
        logger.warning("Scan of %s ended too late: %s", root.name, refused)
    record.refresh_from_db()
    if record.status == RunStatus.DONE and check_usage_alert(root, record):
        outbox.send_pending_emails()  # run by a worker already: the alert goes out now
    return record


@transaction.atomic
def _store_snapshot(record: Scan, result: ScanResult) -> None:
    owners = owners_by_uid(
        {*result.by_uid, *(uid for _, uid in result.by_vc_uid), *(p.uid for p in result.largest)}
    )
    vcs = _vcs_named({*result.by_vc, *(vc for vc, _ in result.by_vc_uid)})
    rows = [
        Usage(scan=record, kind=UsageKind.USER, key=_owner_key(uid, owners),
              user=owners.get(uid), bytes=usage.bytes, apparent_bytes=usage.apparent_bytes,
              files=usage.files)
        for uid, usage in result.by_uid.items()
    ]  # fmt: skip
    rows += [
        Usage(scan=record, kind=UsageKind.VC, key=name, vc=vcs.get(name), bytes=usage.bytes,
              apparent_bytes=usage.apparent_bytes, files=usage.files)
        for name, usage in result.by_vc.items()
    ]  # fmt: skip
    rows += [
        Usage(scan=record, kind=UsageKind.VC_USER, key=f"{name}/{_owner_key(uid, owners)}",
              user=owners.get(uid), vc=vcs.get(name), bytes=usage.bytes,
              apparent_bytes=usage.apparent_bytes, files=usage.files)
        for (name, uid), usage in result.by_vc_uid.items()
    ]  # fmt: skip
    rows += [
        Usage(scan=record, kind=UsageKind.DIRECTORY, key=name, bytes=usage.bytes,
              apparent_bytes=usage.apparent_bytes, files=usage.files)
        for name, usage in result.by_top.items()
    ]  # fmt: skip
    Usage.objects.bulk_create(rows, batch_size=1000)
    LargestPath.objects.bulk_create(
        LargestPath(scan=record, path=large.path[:1000], bytes=large.bytes, uid=large.uid,
                    user=owners.get(large.uid), vc=vcs.get(large.vc))
        for large in result.largest
    )  # fmt: skip
    runs.finish(
        record,
        RunStatus.DONE,
        finished_at=datetime.fromtimestamp(result.finished, UTC),
        files_seen=result.total.files,
        bytes_seen=result.total.bytes,
        directories=result.directories,
        error="\n".join(result.errors[:20]),
    )


def latest_scans() -> list[int]:
    """The newest finished scan of each root: the snapshot the API answers from."""
    latest: dict[int, int] = {}
    for scan_id, root_id in (
        Scan.objects.filter(status=RunStatus.DONE)
        .order_by("root_id", "-finished_at", "-id")
        .values_list("id", "root_id")
    ):
        latest.setdefault(root_id, scan_id)
    return list(latest.values())


def _filesystem_percent(path: str) -> float | None:
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    if not info.f_blocks:
        return None
    return 100.0 * (info.f_blocks - info.f_bfree) / info.f_blocks


def check_usage_alert(root: StorageRoot, record: Scan) -> bool:
    """Email the cluster admins once when the root passes a threshold (the biggest users
    and paths in it); once usage is back under, the next crossing alerts again."""
    percent = _filesystem_percent(root.path) if root.alert_threshold_percent else None
    over = []
    if (
        root.alert_threshold_percent
        and percent is not None
        and (percent >= root.alert_threshold_percent)
    ):
        over.append(f"the filesystem is {percent:.0f}% full "
                    f"(threshold {root.alert_threshold_percent}%)")  # fmt: skip
    if root.alert_threshold_bytes and record.bytes_seen >= root.alert_threshold_bytes:
        over.append(f"{_gib(record.bytes_seen)} under the root "
                    f"(threshold {_gib(root.alert_threshold_bytes)})")  # fmt: skip
    if not over:
        if root.alerted_at is not None:
            StorageRoot.objects.filter(pk=root.pk).update(alerted_at=None)
        return False
    if root.alerted_at is not None:
        return False  # already told
    recipients = admin_emails()
    users = record.usage.filter(kind=UsageKind.USER).order_by("-bytes")[:10]
    paths = record.largest_paths.order_by("-bytes")[:10]
    lines = [
        f"Storage root {root.name} ({root.path}): {'; '.join(over)}.",
        f"Scanned {record.finished_at:%Y-%m-%d %H:%M} UTC: {record.files_seen} files, "
        f"{_gib(record.bytes_seen)}.",
        "",
        "Biggest users:",
        *(f"  {row.key:<24} {_gib(row.bytes):>12}  {row.files} files" for row in users),
        "",
        "Largest paths:",
        *(f"  {_gib(path.bytes):>12}  {path.path}" for path in paths),
    ]
    outbox.queue_email(
        f"storage-alert:{record.pk}",
        recipients,
        f"Storage {root.name} is over its threshold",
        "\n".join(lines),
    )
    StorageRoot.objects.filter(pk=root.pk).update(alerted_at=timezone.now())
    root.alerted_at = timezone.now()
    return True


def admin_emails() -> list[str]:
    staff = User.objects.filter(is_staff=True, is_active=True).exclude(email="")
    return sorted(
        {*staff.values_list("email", flat=True), *settings.TRAINYARD_STORAGE_ALERT_EMAILS}
    )


def _gib(size: int) -> str:
    return f"{size / GIB:.2f} GiB"


@dataclass(frozen=True)
class ExpiryWindow:
    expire_before: float  # epoch seconds: files last used before this have expired
    warn_before: float  # files last used before this expire within the warning days


def expiry_window(root: StorageRoot, now: datetime | None = None) -> ExpiryWindow:
    assert root.expiry_days is not None, "the root has no expiry policy"
    moment = (now or timezone.now()).timestamp()
    expire_before = moment - root.expiry_days * DAY
    warn_before = expire_before + min(root.warn_days, root.expiry_days) * DAY
    return ExpiryWindow(expire_before, warn_before)


def run_expiry(root: StorageRoot, dry_run: bool, now: datetime | None = None) -> ExpiryRun:
    """List (dry run) or delete the root's expired files. A real run first warns the
    owners of files that expire within the warning days, then deletes file by file at
    the root's rate and removes the directories it emptied."""
    window = expiry_window(root, now)
    run = runs.start_expiry_run(root, dry_run, _dt(window.expire_before))
    try:
        candidates = expiry.iter_candidates(
            root.path, window.expire_before, window.warn_before, root.never_expire_patterns
        )
        listed = _record_listing(root, run, candidates, keep_rows=dry_run)
        if not dry_run:
            run.warned_users = warn_owners(root, listed, window)

            def record_progress(done: expiry.Deletion) -> None:
                ExpiryRun.objects.filter(pk=run.pk).update(
                    deleted_files=done.files, deleted_bytes=done.bytes
                )

            deletion = expiry.delete_expired(
                root.path,
                expiry.iter_candidates(
                    root.path, window.expire_before, never_expire=root.never_expire_patterns
                ),
                window.expire_before,
                expiry.RateLimit(root.delete_rate),
                progress=record_progress,
            )
            run.deleted_files, run.deleted_bytes = deletion.files, deletion.bytes
            run.deleted_directories, run.skipped = deletion.directories, len(deletion.skipped)
            for path, reason in deletion.skipped[:20]:
                logger.warning("Expiry on %s kept %s: %s", root.name, path, reason)
        outcome, error = RunStatus.DONE, ""
    except (OSError, ValueError) as failure:
        outcome, error = RunStatus.FAILED, str(failure)
    counts = {name: getattr(run, name) for name in runs.EXPIRY_COUNTS}
    return runs.finish(run, outcome, error=error, **counts)


@dataclass
class OwnerListing:
    files: int = 0
    bytes: int = 0
    first_last_used: float = float("inf")
    paths: list[str] = field(default_factory=list)


def _record_listing(
    root: StorageRoot, run: ExpiryRun, candidates: Iterable[expiry.Candidate], keep_rows: bool
) -> dict[int, OwnerListing]:
    """Count the expired files on the run, keep the report's rows (a dry run), and return
    the files expiring soon per uid (for the warnings)."""
    soon: dict[int, OwnerListing] = defaultdict(lambda: OwnerListing(paths=[]))
    rows: list[ExpiringFile] = []
    limit = settings.TRAINYARD_STORAGE_REPORT_ROWS
    prefix = len(os.path.normpath(root.path)) + 1
    expiry_seconds = (root.expiry_days or 0) * DAY
    for candidate in candidates:
        relative = candidate.path[prefix:]
        if candidate.expired:
            run.expired_files += 1
            run.expired_bytes += candidate.bytes
        else:
            listing = soon[candidate.uid]
            listing.files += 1
            listing.bytes += candidate.bytes
            listing.first_last_used = min(listing.first_last_used, candidate.last_used)
            if len(listing.paths) < 20:
                listing.paths.append(relative)
        if keep_rows and len(rows) < limit:
            rows.append(
                ExpiringFile(
                    run=run, path=relative[:1000], bytes=candidate.bytes,
                    last_used_at=_dt(candidate.last_used),
                    expires_at=_dt(candidate.last_used + expiry_seconds),
                    expired=candidate.expired, uid=candidate.uid,
                    vc_id=None, user_id=None,
                )
            )  # fmt: skip
    if rows:
        owners = owners_by_uid({row.uid for row in rows})
        vcs = _vcs_named(root.vc_of(row.path) for row in rows)
        for row in rows:
            row.user = owners.get(row.uid)
            row.vc = vcs.get(root.vc_of(row.path))
        ExpiringFile.objects.bulk_create(rows, batch_size=1000)
    run.save(update_fields=["expired_files", "expired_bytes"])
    return dict(soon)


def warn_owners(root: StorageRoot, soon: dict[int, OwnerListing], window: ExpiryWindow) -> int:
    """Email each owner whose files expire within the warning days, once per warning
    period. Returns how many were warned."""
    owners = owners_by_uid(soon)
    recent = timezone.now() - timedelta(days=max(root.warn_days, 1))
    already = set(
        ExpiryNotice.objects.filter(root=root, sent_at__gte=recent).values_list("user", flat=True)
    )
    warned = 0
    expiry_seconds = (root.expiry_days or 0) * DAY
    for uid, listing in sorted(soon.items()):
        user = owners.get(uid)
        if user is None or not user.email or user.pk in already:
            continue
        first = _dt(listing.first_last_used + expiry_seconds)
        body = "\n".join([
            f"Hello {user.username},",
            "",
            f"{listing.files} of your files on {root.name} ({root.path}), "
            f"{_gib(listing.bytes)} in all, have not been used for a while and will be "
            f"deleted from {first:%Y-%m-%d} on (files unused for {root.expiry_days} days "
            "expire). Use or move the ones you need. Some of them:",
            "",
            *(f"  {path}" for path in listing.paths or []),
        ])  # fmt: skip
        notice = ExpiryNotice.objects.create(
            root=root, user=user, files=listing.files, bytes=listing.bytes, first_expiry=first
        )
        outbox.queue_email(
            f"expiry-notice:{notice.pk}",
            [user.email],
            f"{listing.files} of your files on {root.name} expire soon",
            body,
        )
        warned += 1
    if warned:
        outbox.send_pending_emails()  # before the deletion this run goes on to
    return warned


def _dt(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def apply_lustre_settings(root: StorageRoot, adapter: lustre.LustreAdapter | None = None) -> int:
    """Give every person with a storage account the root's default quota, and tie each
    VC's directory to its OST pool. Returns the number of commands run."""
    if root.kind != RootKind.LUSTRE or not root.lustre_fsname:
        return 0
    adapter = adapter or lustre.LustreAdapter(
        root.path, root.lustre_fsname, settings.TRAINYARD_LFS_COMMAND,
        settings.TRAINYARD_LCTL_COMMAND,
    )  # fmt: skip
    commands = 0
    if root.quota_block_hard_gib:
        quota = lustre.UserQuota(
            block_soft_kib=(root.quota_block_soft_gib or root.quota_block_hard_gib) * 1024**2,
            block_hard_kib=root.quota_block_hard_gib * 1024**2,
            inode_soft=root.quota_inode_soft,
            inode_hard=root.quota_inode_hard,
        )
        uids = StorageAccount.objects.filter(user__is_active=True).values_list("uid", flat=True)
        commands += adapter.apply_user_quotas(
            dict.fromkeys(uids, quota),
            root.quota_block_grace_seconds,
            root.quota_inode_grace_seconds,
        )
    pools = [
        lustre.PoolSpec(pool.name, tuple(pool.osts.split()), _vc_directory(root, pool.vc.name))
        for pool in LustrePool.objects.filter(root=root).select_related("vc").order_by("name")
    ]
    if pools:
        commands += adapter.apply_pools(pools)
    return commands


def _vc_directory(root: StorageRoot, vc: str) -> str:
    base = root.vc_directory.strip("/")
    return os.path.join(root.path, "" if base in ("", ".") else base, vc)


# --- roots, configured by cluster admins -----------------------------------------------

# Sent by name: the tasks module imports this one.
SCAN_TASK = "backend.storage.tasks.scan_root"
EXPIRE_TASK = "backend.storage.tasks.expire_root"


@transaction.atomic
def create_storage_root(**fields: object) -> StorageRoot:
    return StorageRoot.objects.create(**fields)


@transaction.atomic
def update_storage_root(root: StorageRoot, changes: dict[str, object]) -> StorageRoot:
    """Change a root's settings; the next scan, expiry pass and quota run use them."""
    return save_changes(root, changes)


@transaction.atomic
def delete_storage_root(root: StorageRoot) -> None:
    """Forget the root with its scans and expiry runs; its files stay where they are."""
    root.delete()


@transaction.atomic
def create_storage_account(user: User, uid: int) -> StorageAccount:
    """Map the user to the uid their files carry on shared storage."""
    return StorageAccount.objects.create(user=user, uid=uid)


@transaction.atomic
def update_storage_account(account: StorageAccount, changes: dict[str, object]) -> StorageAccount:
    """Change the mapping's user or uid; the next scan counts the files under it."""
    return save_changes(account, changes)


@transaction.atomic
def remove_storage_account(account: StorageAccount) -> None:
    """Forget the mapping; the uid's files are counted under ``uid:N`` again."""
    account.delete()


@transaction.atomic
def create_lustre_pool(**fields: object) -> LustrePool:
    """Tie a VC's directory on a Lustre root to an OST pool (applied by the next quota
    run)."""
    return LustrePool.objects.create(**fields)


@transaction.atomic
def update_lustre_pool(pool: LustrePool, changes: dict[str, object]) -> LustrePool:
    """Change a pool's name, OSTs, root or VC; the next quota run applies it."""
    return save_changes(pool, changes)


@transaction.atomic
def remove_lustre_pool(pool: LustrePool) -> None:
    """Forget the pool; the directory keeps the striping it has."""
    pool.delete()


def request_scan(root: StorageRoot) -> None:
    """Scan the root in the background once the caller's transaction commits (at once
    outside one). A broker that cannot be reached raises kombu's OperationalError."""
    _queue_on_commit(SCAN_TASK, root.pk)


def request_expiry_dry_run(root: StorageRoot) -> None:
    """List in the background what the root's expiry policy would delete now, deleting
    nothing, once the caller's transaction commits. ActionRefused where it has none."""
    if root.expiry_days is None:
        raise ActionRefused(f"Storage root {root.name} has no expiry policy.")
    _queue_on_commit(EXPIRE_TASK, root.pk, dry_run=True)


def _queue_on_commit(task: str, *args: object, **kwargs: object) -> None:
    signature = current_app.signature(task, args=args, kwargs=kwargs)
    transaction.on_commit(signature.delay)
