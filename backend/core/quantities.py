"""Quantities: CPUs as millicpus; memory as ``"64Gi"``, ``"512Mi"``, ``"1.5G"`` or an
integer of MiB, answered in MiB.

Quantities with a unit follow Kubernetes' grammar (``resource.Quantity``): a signed decimal
number, then a binary suffix (``Ki Mi Gi Ti Pi Ei``), a decimal one (``n u m k M G T P E``)
or a decimal exponent (``e3``, ``E-2``). Parsed here rather than by the Kubernetes client,
whose import (with its schema validator) took two seconds of every process's start.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

MIB = Decimal(1024 * 1024)

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?"
)
_BINARY_POWERS = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str) -> Decimal:
    """Read a Kubernetes resource quantity (``"64Gi"``, ``"1.5G"``, ``"250m"``, ``"1e3"``).

    Returns the exact value in base units (bytes for memory, cores for CPU); raises
    ValueError for anything outside Kubernetes' grammar.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number = Decimal(match["number"])
    if match["binary"]:
        return number * 1024 ** _BINARY_POWERS[match["binary"]]
    if match["exponent"]:
        return number.scaleb(int(match["exponent"]))
    if match["decimal"]:
        return number.scaleb(_DECIMAL_EXPONENTS[match["decimal"]])
    return number


def millicpus(cpus: Decimal | float | int) -> int:
    """CPUs as whole thousandths of a core (``1.5`` is 1500), as the scheduler counts them."""
    return int(Decimal(str(cpus)) * 1000)


def memory_to_mib(value: object) -> int:
    """Convert a memory quantity to whole MiB (rounded up); raise ValueError when malformed.

    A bare number, or a string of digits, is already MiB; a string with a unit is read as
    Kubernetes reads resource quantities (``Ki Mi Gi Ti`` binary, ``k M G T`` decimal).
    """
    if isinstance(value, bool):
        raise ValueError("give a quantity such as 64Gi or a number of MiB")
    if isinstance(value, int | float | Decimal):
        mib = Decimal(str(value))
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("give a quantity such as 64Gi or a number of MiB")
        try:
            mib = Decimal(text)
        except InvalidOperation:
            try:
                mib = parse_quantity(text) / MIB
            except ValueError as error:
                raise ValueError(
                    f"{text!r} is not a memory quantity; use e.g. 64Gi, 512Mi or MiB as a number"
                ) from error
    else:
        raise ValueError("give a quantity such as 64Gi or a number of MiB")
    if not mib.is_finite() or mib < 0:
        raise ValueError("memory must be a positive quantity")
    return int(mib.to_integral_value(rounding="ROUND_CEILING"))
