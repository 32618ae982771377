"""Fixtures for the backend's tests: every role of a resource's role matrix, and a Redis
of a test's own for the fault-injection tests; the local backend end to end (tests/backend/
local_support.py) for the tests of every app that run it."""

from __future__ import annotations

import uuid

import pytest

from tests.backend.local_support import backend, jobs  # noqa: F401 (the local backend end to end)
from tests.backend.resources import roles  # noqa: F401 (the fixture of every role matrix)
from tests.fault_servers import RedisServer


@pytest.fixture
def own_redis(settings):
    """A redis-server of this test's own, which it may kill and flush; Trainyard's locks
    and triggers use it."""
    server = RedisServer()
    settings.REDIS_URL = server.url
    settings.TRAINYARD_REDIS_PREFIX = f"trainyard-test-{uuid.uuid4().hex}"
    yield server
    server.close()
