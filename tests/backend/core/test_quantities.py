"""Memory quantities as users type them, answered in MiB (no database)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes.utils.quantity import parse_quantity as kubernetes_parse_quantity

from backend.core.quantities import memory_to_mib, parse_quantity


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


@pytest.mark.parametrize(
    ("quantity", "value"),
    [
        ("64Gi", 64 * 1024**3),
        ("1.5G", 1_500_000_000),
        ("250m", Decimal("0.25")),
        ("100n", Decimal("1E-7")),
        ("2k", 2000),
        ("1e3", 1000),
        ("5E-1", Decimal("0.5")),
        ("1E", 10**18),  # E alone is exa, not an exponent
        (".5Ki", 512),
        ("5.Mi", 5 * 1024**2),
        ("+1Ti", 1024**4),
        ("-2Mi", -2 * 1024**2),
        ("7", 7),
    ],
)
def test_kubernetes_quantities_are_read_as_kubernetes_reads_them(quantity, value):
    assert parse_quantity(quantity) == value
    assert parse_quantity(quantity) == kubernetes_parse_quantity(quantity)


@pytest.mark.parametrize(
    "quantity", ["", "Gi", "1ki", "1KiB", "1 Gi", "1e", "1.2.3", "1K", "1Gib", "e3", "1_000Mi"]
)
def test_text_outside_the_kubernetes_grammar_is_refused(quantity):
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(quantity)
