"""Storage over REST: roots (cluster admins write), scans with progress, usage snapshots,
the largest paths and the expiry report."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from rest_framework import serializers

from backend.storage.models import (
    ExpiringFile,
    ExpiryRun,
    LargestPath,
    Scan,
    StorageRoot,
    Usage,
)
from storagemanager.expiry import Protection


class StorageRootSerializer(serializers.ModelSerializer):
    class Meta:
        model = StorageRoot
        fields = [
            "id", "name", "path", "kind", "vc_directory", "expiry_days", "never_expire",
            "warn_days", "delete_rate", "scan_interval_minutes", "alert_threshold_percent",
            "alert_threshold_bytes", "alerted_at", "lustre_fsname", "quota_block_soft_gib",
            "quota_block_hard_gib", "quota_inode_soft", "quota_inode_hard",
            "quota_block_grace_seconds", "quota_inode_grace_seconds", "created_at",
        ]  # fmt: skip
        read_only_fields = ["id", "alerted_at", "created_at"]

    def validate_path(self, value: str) -> str:
        if not value.startswith("/") or ".." in PurePosixPath(value).parts:
            raise serializers.ValidationError("Give an absolute path without '..'.")
        if value != "/" and os.path.normpath(value) != value:
            raise serializers.ValidationError(f"Write it as {os.path.normpath(value)}.")
        if value == "/":
            raise serializers.ValidationError("The filesystem root cannot be a storage root.")
        return value

    def validate_vc_directory(self, value: str) -> str:
        if value and (value.startswith("/") or ".." in PurePosixPath(value).parts):
            raise serializers.ValidationError("Give a path relative to the root, without '..'.")
        return value

    def validate_never_expire(self, value: str) -> str:
        for pattern in Protection(value.splitlines()).patterns:
            if ".." in PurePosixPath(pattern).parts:
                raise serializers.ValidationError(f"{pattern}: patterns stay inside the root.")
        return value

    def validate_alert_threshold_percent(self, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 100:
            raise serializers.ValidationError("A percentage from 1 to 100.")
        return value

    def validate(self, attrs: dict) -> dict:
        merged = {**(self.instance.__dict__ if self.instance else {}), **attrs}
        soft, hard = merged.get("quota_block_soft_gib"), merged.get("quota_block_hard_gib")
        if soft and hard and soft > hard:
            raise serializers.ValidationError(
                {"quota_block_soft_gib": ["The soft limit cannot exceed the hard limit."]}
            )
        if merged.get("kind") == "lustre" and hard and not merged.get("lustre_fsname"):
            raise serializers.ValidationError(
                {"lustre_fsname": ["Quotas on Lustre need the filesystem name."]}
            )
        return attrs


class ScanSerializer(serializers.ModelSerializer):
    # Declared fields leave the class (DRF's metaclass), so this is no Field.root.
    root: serializers.SlugRelatedField[StorageRoot] = serializers.SlugRelatedField(  # type: ignore[assignment]
        slug_field="name", read_only=True
    )

    class Meta:
        model = Scan
        fields = [
            "id", "root", "status", "started_at", "finished_at", "files_seen", "bytes_seen",
            "directories", "error",
        ]  # fmt: skip


# What every row of a scan's snapshot shows: its root, when the scan finished, and the user
# and VC it is counted under (None where none). No docstring: the schema would give it to
# every subclass's component.
class SnapshotRowSerializer(serializers.ModelSerializer):
    root = serializers.CharField(source="scan.root.name")  # type: ignore[assignment]  # not Field.root, as above
    snapshot_at = serializers.DateTimeField(source="scan.finished_at")
    user = serializers.CharField(source="user.username", default=None)
    vc = serializers.CharField(source="vc.name", default=None)


class UsageSerializer(SnapshotRowSerializer):
    class Meta:
        model = Usage
        fields = [
            "root", "snapshot_at", "kind", "key", "user", "vc", "bytes", "apparent_bytes",
            "files",
        ]  # fmt: skip


class LargestPathSerializer(SnapshotRowSerializer):
    class Meta:
        model = LargestPath
        fields = ["root", "snapshot_at", "path", "bytes", "uid", "user", "vc"]


class ExpiryRunSerializer(serializers.ModelSerializer):
    # Declared fields leave the class (DRF's metaclass), so this is no Field.root.
    root: serializers.SlugRelatedField[StorageRoot] = serializers.SlugRelatedField(  # type: ignore[assignment]
        slug_field="name", read_only=True
    )

    class Meta:
        model = ExpiryRun
        fields = [
            "id", "root", "dry_run", "status", "started_at", "finished_at", "expire_before",
            "expired_files", "expired_bytes", "deleted_files", "deleted_bytes",
            "deleted_directories", "skipped", "warned_users", "error",
        ]  # fmt: skip


class ExpiringFileSerializer(serializers.ModelSerializer):
    root = serializers.CharField(source="run.root.name")  # type: ignore[assignment]  # not Field.root, as above
    report_at = serializers.DateTimeField(source="run.started_at")
    user = serializers.CharField(source="user.username", default=None)
    vc = serializers.CharField(source="vc.name", default=None)

    class Meta:
        model = ExpiringFile
        fields = [
            "root", "report_at", "path", "bytes", "last_used_at", "expires_at", "expired",
            "uid", "user", "vc",
        ]  # fmt: skip


class QueuedSerializer(serializers.Serializer):
    """A background run was queued: what, in words."""

    detail = serializers.CharField()
