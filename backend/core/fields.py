"""Serializer fields shared by the API, and the fields apps above add to an answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, cast

from drf_spectacular.drainage import set_override
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from backend.core.extensions import AnswerField, AnswerFields
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


# Where an answer's context keeps each added field's values, loaded once per answer.
ADDED_VALUES = "trainyard_added_values"


class AddedField(serializers.Field):
    """A read-only field an app above registered (backend.core.extensions.AnswerField):
    its schema is the registration's, its value what the registration gives per object."""

    def __init__(self, added: AnswerField[Any]) -> None:
        super().__init__(read_only=True, source="*")
        self.added = added
        set_override(self, "field", added.schema())  # extend_schema_field, on this instance

    def to_representation(self, instance: Any) -> object:
        return self._values()(instance)

    def _values(self) -> Callable[[Any], object]:
        # A list's objects share the root's context, so its values are loaded once.
        context = cast("dict[str, Any]", self.context)  # the root serializer's own dict
        loaded: dict[str, Callable[[Any], object]] = context.setdefault(ADDED_VALUES, {})
        if self.added.name not in loaded:
            loaded[self.added.name] = self.added.values(context.get("request"))
        return loaded[self.added.name]


# A serializer whose answer also shows the fields apps above added to ``added_fields``, each
# where its registration places it. (No docstring: the schema would show it as the
# description of every serializer built on it.)
class ExtensibleSerializer(serializers.Serializer):
    added_fields: ClassVar[AnswerFields[Any]]

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = dict(super().get_fields())
        for added in self.added_fields:
            names = list(fields)
            at = names.index(added.after) + 1 if added.after is not None else len(names)
            items = list(fields.items())
            items.insert(at, (added.name, AddedField(added)))
            fields = dict(items)
        return fields
