"""Serializer fields shared by the API."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from backend.core.quantities import memory_to_mib

# What a PositiveIntegerField holds on every database (2 PiB): more is a typo, not a machine.
MAX_MIB = 2**31 - 1


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_MIB},
            {"type": "string", "example": "64Gi"},
        ],
        "description": "MiB as an integer, or a quantity such as 64Gi or 512Mi; answered in MiB.",
    }
)
class MemoryField(serializers.Field):
    """Memory as ``"64Gi"`` or an integer of MiB; always answered as an integer of MiB."""

    def to_internal_value(self, data: object) -> int:
        try:
            mib = memory_to_mib(data)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from error
        if mib < 1:
            raise serializers.ValidationError("Give at least 1 MiB.")
        if mib > MAX_MIB:
            raise serializers.ValidationError(f"Give at most {MAX_MIB} MiB (2 PiB).")
        return mib

    def to_representation(self, value: int) -> int:
        return value


# JSON columns answered as they are stored; these say in the schema what the JSON holds.
# Subclasses of JSONField that change nothing but their schema (see representation.py).


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class StringMapJSONField(serializers.JSONField):
    """JSON holding an object of strings, e.g. an environment or node labels."""


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class StringListJSONField(serializers.JSONField):
    """JSON holding a list of strings, e.g. node names."""
