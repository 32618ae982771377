"""Memory quantities as users type them, answered in MiB (no database)."""

from __future__ import annotations

import pytest

from backend.core.quantities import memory_to_mib


@pytest.mark.parametrize(
    ("quantity", "mib"),
    [
        ("64Gi", 64 * 1024),
        ("512Mi", 512),
        ("1.5G", 1431),  # 1.5e9 bytes is 1430.5 MiB, rounded up
        (1024, 1024),
        ("1024", 1024),
        (" 2Gi ", 2048),
    ],
)
def test_quantities_are_read_as_mib(quantity, mib):
    assert memory_to_mib(quantity) == mib


@pytest.mark.parametrize(
    ("quantity", "message"),
    [
        ("", "give a quantity"),
        ("abc", "'abc' is not a memory quantity"),
        (-1, "positive"),
        ("-5Gi", "positive"),
        (True, "give a quantity"),
        (None, "give a quantity"),
    ],
)
def test_malformed_quantities_are_refused_with_a_hint(quantity, message):
    with pytest.raises(ValueError, match=message):
        memory_to_mib(quantity)
