"""Lustre quotas and pools: the exact commands issued, through stand-in ``lfs`` and
``lctl`` programs put on PATH (there is no Lustre here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storagemanager.lustre import LustreAdapter, LustreError, PoolSpec, UserQuota

STAND_INS = Path(__file__).parent / "bin"


@pytest.fixture
def lustre_log(tmp_path: Path, monkeypatch) -> Path:
    log = tmp_path / "lustre.log"
    monkeypatch.setenv("PATH", f"{STAND_INS}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("LUSTRE_STANDIN_LOG", str(log))
    monkeypatch.setenv("LUSTRE_STANDIN_STATE", str(tmp_path / "pools.json"))
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_quotas_set_the_grace_then_each_person(lustre_log: Path):
    adapter = LustreAdapter("/mnt/lustre", "lustre")
    quota = UserQuota(block_soft_kib=900 * 1024**2, block_hard_kib=1024**3, inode_hard=10**6)

    adapter.apply_user_quotas({1002: quota, 1001: quota}, block_grace=604800, inode_grace=86400)

    assert calls(lustre_log) == [
        ["lfs", "setquota", "-t", "-u", "-b", "604800", "-i", "86400", "/mnt/lustre"],
        *(
            ["lfs", "setquota", "-u", uid, "-b", "943718400k", "-B", "1073741824k",
             "-i", "0", "-I", "1000000", "/mnt/lustre"]
            for uid in ("1001", "1002")
        ),
    ]  # fmt: skip


def test_pools_are_created_once_and_tied_to_the_vc_directories(lustre_log: Path):
    adapter = LustreAdapter("/mnt/lustre", "lustre")
    pools = [PoolSpec("vision", ("lustre-OST[0-3]",), "/mnt/lustre/vcs/vision")]

    adapter.apply_pools(pools)
    adapter.apply_pools(pools)  # the second time the pool exists: no pool_new

    assert calls(lustre_log) == [
        ["lfs", "pool_list", "lustre"],
        ["lctl", "pool_new", "lustre.vision"],
        ["lctl", "pool_add", "lustre.vision", "lustre-OST[0-3]"],
        ["lfs", "setstripe", "--pool", "vision", "/mnt/lustre/vcs/vision"],
        ["lfs", "pool_list", "lustre"],
        ["lctl", "pool_add", "lustre.vision", "lustre-OST[0-3]"],
        ["lfs", "setstripe", "--pool", "vision", "/mnt/lustre/vcs/vision"],
    ]


def test_a_failing_command_is_an_error_with_its_message(lustre_log: Path):
    adapter = LustreAdapter("/mnt/lustre", "lustre")

    with pytest.raises(LustreError, match="not found"):
        adapter.run(["lctl", "pool_add", "lustre.missing", "OST0"])
