"""A filesystem mounted inside a root is neither scanned nor expired: the test mounts a
tmpfs inside a tree, in a mount namespace of its own (``unshare -m``, root only), and
runs the scan and the expiry there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

IN_NAMESPACE = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from storagemanager.expiry import Candidate, delete_expired, iter_candidates
    from storagemanager.scan import scan_root
    from tests.storagemanager.trees import OLD, cut_off, make_files

    root = Path(sys.argv[1])
    mounted = make_files(root / "mnt", 3, size=10, old=True)
    own = make_files(root / "own", 2, size=10, old=True)
    cut = cut_off(root / "own")
    scan = scan_root(str(root))
    deletion = delete_expired(str(root), iter_candidates(str(root), cut), cut)
    forged = delete_expired(str(root), [Candidate(mounted[0], 0, 0, OLD, True)], cut)
    print(json.dumps({
        "scanned_files": scan.total.files,
        "skipped_mounts": scan.skipped_mounts,
        "deleted": deletion.files,
        "mounted_left": sum(os.path.exists(path) for path in mounted),
        "own_left": sum(os.path.exists(path) for path in own),
        "forged_reason": forged.skipped[0][1] if forged.skipped else "",
    }))
    """
)


def _can_mount() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "none", "/mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount(), reason="needs a mount namespace (root)")
def test_a_filesystem_mounted_inside_the_root_is_left_alone(tmp_path: Path):
    root = tmp_path / "root"
    (root / "mnt").mkdir(parents=True)

    ran = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'mount -t tmpfs none "$1/mnt" && exec "$2" -c "$3" "$1"',
         "sh", str(root), sys.executable, IN_NAMESPACE],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout)
    assert outcome["skipped_mounts"] == [f"{root}/mnt"]
    assert outcome["scanned_files"] == 2  # own/ only
    assert outcome["deleted"] == 2 and outcome["own_left"] == 0
    assert outcome["mounted_left"] == 3
    assert "another filesystem" in outcome["forged_reason"]
