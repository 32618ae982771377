"""Memory quantities: ``"64Gi"``, ``"512Mi"``, ``"1.5G"`` or an integer of MiB, answered in MiB."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity

MIB = Decimal(1024 * 1024)


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
            except (ValueError, InvalidOperation) as error:
                raise ValueError(
                    f"{text!r} is not a memory quantity; use e.g. 64Gi, 512Mi or MiB as a number"
                ) from error
    else:
        raise ValueError("give a quantity such as 64Gi or a number of MiB")
    if not mib.is_finite() or mib < 0:
        raise ValueError("memory must be a positive quantity")
    return int(mib.to_integral_value(rounding="ROUND_CEILING"))
