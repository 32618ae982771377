"""Fixtures of the elastic tests that run the live job manager over the memory backend
(it resizes at once) with one 8-GPU node schedulable, so that sizes are what the GPUs
allow: import ``backend`` and ``one_node`` from here."""

from __future__ import annotations

import pytest

from backend.clusters.models import Node
from jobmanager.backends.memory import MemoryBackend


@pytest.fixture
def backend(tmp_path, settings) -> MemoryBackend:
    """The memory backend, its logs in the test's own folder; jobs resize at every pass."""
    settings.TRAINYARD_LOG_DIR = tmp_path / "logs"
    settings.TRAINYARD_ELASTIC_MIN_INTERVAL_SECONDS = 0
    return MemoryBackend(log_dir=settings.TRAINYARD_LOG_DIR)


@pytest.fixture
def one_node(world) -> None:
    """Only a100-1 (8 GPUs) schedulable."""
    Node.objects.exclude(name="a100-1").update(schedulable=False)
