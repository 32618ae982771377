"""The portal's own files are its own: what it finds under var/ is tightened at start, and
what it creates afterwards is private (umask 077)."""

from __future__ import annotations

import os
import stat

from backend.core.private_files import make_portal_files_private, use_private_umask


def mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_loose_files_of_an_earlier_version_are_tightened_and_new_ones_are_private(tmp_path):
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    for name in ("secret_key", "trainyard.sqlite3", "trainyard.sqlite3-wal", "redis.db",
                 "celerybeat-schedule"):  # fmt: skip
        (var / name).write_text("x")
        (var / name).chmod(0o644)
    (var / "run").mkdir()
    (var / "run").chmod(0o755)
    previous = os.umask(0o022)
    try:
        make_portal_files_private(var)
        use_private_umask()  # as the servers do when they start
        (var / "made-later").write_text("x")
        (var / "dir-made-later").mkdir()
    finally:
        os.umask(previous | 0o077)  # the suite keeps the portal's umask

    assert mode(var) == (0o711 if os.geteuid() == 0 else 0o700)  # jobs pass through, list nothing
    assert {path.name: mode(path) for path in var.iterdir() if path.is_file()} == {
        "secret_key": 0o600, "trainyard.sqlite3": 0o600, "trainyard.sqlite3-wal": 0o600,
        "redis.db": 0o600, "celerybeat-schedule": 0o600, "made-later": 0o600,
    }  # fmt: skip
    assert mode(var / "run") == 0o700 and mode(var / "dir-made-later") == 0o700
