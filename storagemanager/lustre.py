"""Lustre quotas and OST pools, applied with Lustre's own command-line tools.

Per-person quotas go through ``lfs setquota``; OST pools are created and filled with
``lctl pool_new`` / ``lctl pool_add`` (run where the MGS is reachable), listed with
``lfs pool_list``, and a VC's directory is tied to its pool with ``lfs setstripe --pool``,
so that new files there land on the VC's OSTs. The commands are planned as plain argument
lists (tested exactly) and run by :class:`LustreAdapter`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Runner = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class UserQuota:
    """Limits for one person; block limits in KiB (``lfs`` units), grace in seconds."""

    block_soft_kib: int
    block_hard_kib: int
    inode_soft: int = 0
    inode_hard: int = 0


@dataclass(frozen=True)
class PoolSpec:
    name: str  # the pool within the filesystem, e.g. "vision"
    osts: tuple[str, ...]  # OST names or index ranges, e.g. ("lustre-OST[0-3]",)
    directory: str  # the VC's directory on the Lustre mount


class LustreError(RuntimeError):
    pass


def user_quota_command(lfs: str, mount: str, uid: int, quota: UserQuota) -> list[str]:
    return [
        lfs, "setquota", "-u", str(uid),
        "-b", f"{quota.block_soft_kib}k", "-B", f"{quota.block_hard_kib}k",
        "-i", str(quota.inode_soft), "-I", str(quota.inode_hard),
        mount,
    ]  # fmt: skip


def grace_command(lfs: str, mount: str, block_grace: int, inode_grace: int) -> list[str]:
    return [lfs, "setquota", "-t", "-u", "-b", str(block_grace), "-i", str(inode_grace), mount]


def pool_commands(
    lfs: str, lctl: str, fsname: str, pool: PoolSpec, existing: set[str]
) -> list[list[str]]:
    """Create the pool unless it exists, add its OSTs (adding an OST twice is harmless),
    and point the VC's directory at it."""
    full = f"{fsname}.{pool.name}"
    commands: list[list[str]] = []
    if pool.name not in existing:
        commands.append([lctl, "pool_new", full])
    if pool.osts:
        commands.append([lctl, "pool_add", full, *pool.osts])
    commands.append([lfs, "setstripe", "--pool", pool.name, pool.directory])
    return commands


def run_command(argv: Sequence[str]) -> str:
    completed = subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    if completed.returncode != 0:
        message = completed.stderr.strip() or completed.stdout.strip()
        raise LustreError(f"{' '.join(argv)} failed ({completed.returncode}): {message}")
    return completed.stdout


class LustreAdapter:
    """Applies quotas and pools on one Lustre filesystem mounted at ``mount``."""

    def __init__(
        self,
        mount: str,
        fsname: str,
        lfs: str = "lfs",
        lctl: str = "lctl",
        runner: Runner = run_command,
    ) -> None:
        self.mount, self.fsname = mount, fsname
        self.lfs, self.lctl, self.run = lfs, lctl, runner

    def existing_pools(self) -> set[str]:
        """Pool names, from ``lfs pool_list FSNAME`` ("Pools from lustre:" then "lustre.p")."""
        output = self.run([self.lfs, "pool_list", self.fsname])
        return {
            line.strip().split(".", 1)[1]
            for line in output.splitlines()
            if line.strip().startswith(f"{self.fsname}.")
        }

    def apply_user_quotas(
        self, quotas: dict[int, UserQuota], block_grace: int, inode_grace: int
    ) -> int:
        """Set the grace periods, then each uid's limits; returns the commands run."""
        commands = [grace_command(self.lfs, self.mount, block_grace, inode_grace)]
        commands += [
            user_quota_command(self.lfs, self.mount, uid, quota)
            for uid, quota in sorted(quotas.items())
        ]
        for command in commands:
            self.run(command)
        return len(commands)

    def apply_pools(self, pools: Sequence[PoolSpec]) -> int:
        existing = self.existing_pools()
        commands = [
            command
            for pool in pools
            for command in pool_commands(self.lfs, self.lctl, self.fsname, pool, existing)
        ]
        for command in commands:
            self.run(command)
        return len(commands) + 1
