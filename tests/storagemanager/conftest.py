"""Fixtures for the storage manager's filesystem tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SHM = Path("/dev/shm")


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A fresh directory on tmpfs (/dev/shm) where there is one, else ``tmp_path``: making
    200,000 files costs 3 µs each on tmpfs and up to 250 µs on a loaded virtual disk."""
    if not (SHM.is_dir() and os.access(SHM, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="trainyard-storage-", dir=SHM))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
