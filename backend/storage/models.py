"""Shared storage roots (NFS, Lustre, local), their scans as dated snapshots of usage, and
the expiry runs that list or delete files nobody has used for the policy's days."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from backend.core.querysets import Action, ClusterWideQuerySet
from backend.vcs.models import VirtualCluster


class RootKind(models.TextChoices):
    NFS = "nfs"
    LUSTRE = "lustre"
    LOCAL = "local"


class StorageRoot(models.Model):
    """A directory tree the storage manager scans, expires and alerts on."""

    name = models.SlugField(max_length=60, unique=True)
    path = models.CharField(max_length=500, unique=True, help_text="Absolute path on workers.")
    kind = models.CharField(max_length=10, choices=RootKind.choices, default=RootKind.NFS)
    vc_directory = models.CharField(
        max_length=200,
        blank=True,
        help_text="Directory (relative to the root, '.' for the root itself) whose "
        "subdirectories are named after VCs; empty when VCs own no directory here.",
    )
    expiry_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Files unused this many days are deleted; empty: never."
    )
    never_expire = models.TextField(
        blank=True, help_text="Paths that never expire: one glob per line, relative to the root."
    )
    warn_days = models.PositiveIntegerField(
        default=7, help_text="Owners are emailed this many days before their files expire."
    )
    delete_rate = models.PositiveIntegerField(
        default=200, help_text="Files deleted per second at most (0: no limit)."
    )
    scan_interval_minutes = models.PositiveIntegerField(default=24 * 60)
    alert_threshold_percent = models.PositiveIntegerField(
        null=True, blank=True, help_text="Alert when the filesystem is this full (percent)."
    )
    alert_threshold_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Alert when the scan finds this much under the root."
    )
    alerted_at = models.DateTimeField(
        null=True, blank=True, help_text="When the last alert went; cleared once usage is back."
    )
    # Lustre only: the default quota of every person and the grace periods (lfs setquota).
    lustre_fsname = models.CharField(max_length=60, blank=True)
    quota_block_soft_gib = models.PositiveIntegerField(null=True, blank=True)
    quota_block_hard_gib = models.PositiveIntegerField(null=True, blank=True)
    quota_inode_soft = models.PositiveIntegerField(default=0)
    quota_inode_hard = models.PositiveIntegerField(default=0)
    quota_block_grace_seconds = models.PositiveIntegerField(default=7 * 86400)
    quota_inode_grace_seconds = models.PositiveIntegerField(default=7 * 86400)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ClusterWideQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.path})"

    @property
    def never_expire_patterns(self) -> list[str]:
        return [line.strip() for line in self.never_expire.splitlines() if line.strip()]

    def vc_of(self, relative: str) -> str:
        """The VC whose directory holds ``relative`` (a path under the root), or ""."""
        if not self.vc_directory:
            return ""
        base = self.vc_directory.strip("/")
        parts = relative.split("/")
        if base not in ("", "."):
            prefix = base.split("/")
            if parts[: len(prefix)] != prefix:
                return ""
            parts = parts[len(prefix) :]
        return parts[0] if len(parts) > 1 else ""


class StorageAccount(models.Model):
    """Owner mapping: the uid a Trainyard user's files carry on shared storage."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="storage_account"
    )
    uid = models.PositiveIntegerField(unique=True)

    def __str__(self) -> str:
        return f"{self.user} = uid {self.uid}"


class LustrePool(models.Model):
    """An OST pool that a VC's directory on a Lustre root writes to."""

    root = models.ForeignKey(StorageRoot, on_delete=models.CASCADE, related_name="pools")
    vc = models.ForeignKey(VirtualCluster, on_delete=models.CASCADE, related_name="lustre_pools")
    name = models.SlugField(max_length=60)
    osts = models.CharField(max_length=500, help_text="OSTs, space-separated: lustre-OST[0-3]")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["root", "name"], name="pool_unique_per_root"),
            models.UniqueConstraint(fields=["root", "vc"], name="pool_unique_per_vc"),
        ]

    def __str__(self) -> str:
        return f"{self.root.name}:{self.name} for {self.vc}"


class RunStatus(models.TextChoices):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Scan(models.Model):
    """One walk of a root: its progress while it runs, then a snapshot of its usage."""

    root = models.ForeignKey(StorageRoot, on_delete=models.CASCADE, related_name="scans")
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    files_seen = models.PositiveBigIntegerField(default=0)
    bytes_seen = models.PositiveBigIntegerField(default=0)
    directories = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True)

    objects = ClusterWideQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["root", "status", "-finished_at"])]

    def __str__(self) -> str:
        return f"scan of {self.root.name} at {self.started_at:%Y-%m-%d %H:%M}"


class ScopedByOwnerQuerySet(models.QuerySet):
    """Rows about one person, one VC, or the whole root: people see their own, VC admins
    their VCs', cluster admins everything (rows of unmapped uids and directories too)."""

    def visible_to(self, user: object, action: Action = "view") -> ScopedByOwnerQuerySet:
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_staff:  # type: ignore[attr-defined]
            return self
        administered = VirtualCluster.objects.administered_by(user).values("id")
        if action == "administer":
            return self.filter(vc__in=administered)
        return self.filter(Q(user=user) | Q(vc__in=administered))


class UsageKind(models.TextChoices):
    USER = "user"  # one person on the whole root
    VC = "vc"  # everything in one VC's directory
    VC_USER = "vc_user"  # one person within one VC's directory
    DIRECTORY = "directory"  # one top-level directory


class Usage(models.Model):
    scan = models.ForeignKey(Scan, on_delete=models.CASCADE, related_name="usage")
    kind = models.CharField(max_length=10, choices=UsageKind.choices)
    key = models.CharField(max_length=255, help_text="Username, uid:N, VC or directory.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True
    )
    vc = models.ForeignKey(VirtualCluster, on_delete=models.CASCADE, null=True, blank=True)
    bytes = models.PositiveBigIntegerField()
    apparent_bytes = models.PositiveBigIntegerField()
    files = models.PositiveBigIntegerField()

    objects = ScopedByOwnerQuerySet.as_manager()

    class Meta:
        ordering = ["-bytes", "key", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}: {self.bytes} bytes"


class LargestPath(models.Model):
    scan = models.ForeignKey(Scan, on_delete=models.CASCADE, related_name="largest_paths")
    path = models.CharField(max_length=1000, help_text="Relative to the root.")
    bytes = models.PositiveBigIntegerField()
    uid = models.PositiveIntegerField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True
    )
    vc = models.ForeignKey(VirtualCluster, on_delete=models.CASCADE, null=True, blank=True)

    objects = ScopedByOwnerQuerySet.as_manager()

    class Meta:
        ordering = ["-bytes", "id"]

    def __str__(self) -> str:
        return f"{self.path}: {self.bytes} bytes"


class ExpiryRun(models.Model):
    """A pass of the expiry policy over a root: a dry run lists, a real run deletes."""

    root = models.ForeignKey(StorageRoot, on_delete=models.CASCADE, related_name="expiry_runs")
    dry_run = models.BooleanField(default=True)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    expire_before = models.DateTimeField(help_text="Files last used before this expire.")
    expired_files = models.PositiveBigIntegerField(default=0)
    expired_bytes = models.PositiveBigIntegerField(default=0)
    deleted_files = models.PositiveBigIntegerField(default=0)
    deleted_bytes = models.PositiveBigIntegerField(default=0)
    deleted_directories = models.PositiveBigIntegerField(default=0)
    skipped = models.PositiveBigIntegerField(default=0)
    warned_users = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    objects = ClusterWideQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"{'dry run' if self.dry_run else 'expiry'} of {self.root.name}"


class ExpiringFile(models.Model):
    """One file of a dry run's report (the first TRAINYARD_STORAGE_REPORT_ROWS of them)."""

    run = models.ForeignKey(ExpiryRun, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1000, help_text="Relative to the root.")
    bytes = models.PositiveBigIntegerField()
    last_used_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    expired = models.BooleanField()
    uid = models.PositiveIntegerField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True
    )
    vc = models.ForeignKey(VirtualCluster, on_delete=models.CASCADE, null=True, blank=True)

    objects = ScopedByOwnerQuerySet.as_manager()

    class Meta:
        ordering = ["expires_at", "path", "id"]

    def __str__(self) -> str:
        return self.path


class ExpiryNotice(models.Model):
    """An email that warned an owner of files about to expire (one per warning period)."""

    root = models.ForeignKey(StorageRoot, on_delete=models.CASCADE, related_name="notices")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    sent_at = models.DateTimeField(default=timezone.now)
    files = models.PositiveBigIntegerField()
    bytes = models.PositiveBigIntegerField()
    first_expiry = models.DateTimeField()

    class Meta:
        ordering = ["-sent_at", "-id"]

    def __str__(self) -> str:
        return f"warned {self.user} about {self.root.name}"
