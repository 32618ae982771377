"""A fast path for model serializers that answer many rows: the same output, less machinery.

DRF's generic ``Serializer.to_representation`` builds every field anew for each serializer,
walks them through ``get_attribute`` (with its callable and mapping checks) and converts
datetimes through ``enforce_timezone``; on a page of 50 jobs that is most of the request.
``CompiledRepresentationMixin`` turns the serializer's fields, once per class, into a plan of
plain attribute reads and converters that answer exactly what the generic path answers, and
falls back to the generic path for anything it cannot prove the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, tzinfo
from typing import Any

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist, ObjectDoesNotExist
from django.db import models
from django.utils import timezone
from rest_framework import serializers
from rest_framework.settings import api_settings

Converter = Callable[[Any], Any]
# field name, attribute path, converter (an IsoDatetime until bound to a time zone).
Step = tuple[str, tuple[str, ...], "Converter | IsoDatetime"]
# None when the serializer must use the generic path.
Plan = tuple[Step, ...] | None


def _identity(value: Any) -> Any:
    return value


class IsoDatetime:
    """``DateTimeField.to_representation`` for aware datetimes in ISO 8601, without the rest.

    Bound to the current time zone once per answer: looking it up is dearer than the rest.
    """

    def __init__(self, field: serializers.DateTimeField) -> None:
        self.generic = field.to_representation

    def bind(self, zone: tzinfo) -> Converter:
        generic = self.generic

        def convert(value: Any) -> Any:
            if not isinstance(value, datetime) or value.utcoffset() is None:
                return generic(value)
            text = value.astimezone(zone).isoformat()
            return text[:-6] + "Z" if text.endswith("+00:00") else text

        return convert


def _bound(plan: tuple[Step, ...], zone: tzinfo) -> list[tuple[str, tuple[str, ...], Converter]]:
    return [
        (name, attrs, convert.bind(zone) if isinstance(convert, IsoDatetime) else convert)
        for name, attrs, convert in plan
    ]


def _null_answers_none(field: serializers.Field) -> bool:
    """Whether DRF answers None for the field when a relation on its path is null."""
    if field.default is not serializers.empty:
        return field.default is None
    return field.allow_null


def _converter(field: serializers.Field) -> Converter | IsoDatetime:
    """The cheapest callable that answers what ``field.to_representation`` answers."""
    kind = type(field)
    if kind is serializers.CharField:
        return str
    if kind is serializers.IntegerField:
        return int
    if (
        isinstance(field, serializers.JSONField)
        and kind.to_representation is serializers.JSONField.to_representation
        and not field.binary
    ):
        return _identity  # also the JSON fields that only say more in the schema
    if (
        type(field) is serializers.DateTimeField
        and settings.USE_TZ
        and not hasattr(field, "format")
        and not hasattr(field, "timezone")
        and str(api_settings.DATETIME_FORMAT).lower() == "iso-8601"
    ):
        return IsoDatetime(field)
    return field.to_representation


def _is_model_field_path(model: type[models.Model], attrs: list[str]) -> bool:
    """Whether ``attrs`` reads plain model fields (through foreign keys), never a method."""
    for position, attr in enumerate(attrs):
        try:
            model_field = model._meta.get_field(attr)
        except FieldDoesNotExist:
            return False
        if not model_field.concrete or model_field.many_to_many:
            return False
        if model_field.is_relation:
            related = model_field.related_model
            if related is None:  # a concrete relation always has its model
                return False
            model = related
        elif position != len(attrs) - 1:
            return False
    return True


def compile_plan(serializer: serializers.ModelSerializer) -> Plan:
    """Field by field, how to read and convert; None if any field needs the generic path."""
    model = serializer.Meta.model
    derived = set(getattr(serializer, "derived_fields", ()))
    plan: list[Step] = []
    for field in serializer._readable_fields:
        if field.field_name in derived:
            continue  # answered by the serializer's derive(), from the other fields' answers
        attrs = list(field.source_attrs)
        if field.source == "*" or not attrs or not _is_model_field_path(model, attrs):
            return None
        if type(field).get_attribute is not serializers.Field.get_attribute:
            return None
        if field.field_name is None:  # a readable field is bound, so it has its name
            return None
        plan.append((field.field_name, tuple(attrs), _converter(field)))
    return tuple(plan)


class CompiledRepresentationMixin:
    """Mix into a ``ModelSerializer`` whose fields do not depend on its context.

    Besides model instances it answers rows from ``QuerySet.values(*cls.row_lookups())``,
    which spares a list page the building of model instances.
    """

    # Fields whose answers follow from the other fields' answers: left out of the plan and
    # set by derive() on the compiled path (the generic path reads them as DRF does).
    derived_fields: tuple[str, ...] = ()
    _compiled_plans: dict[type, Plan] = {}
    _nullable_paths: dict[type, frozenset[str]] = {}

    @classmethod
    def _plan(cls, serializer: Any = None) -> Plan:
        try:
            return CompiledRepresentationMixin._compiled_plans[cls]
        except KeyError:
            if serializer is None:
                serializer = cls()
            if not isinstance(serializer, serializers.ModelSerializer):
                raise TypeError(f"{cls.__name__} must mix into a ModelSerializer") from None
            plan = compile_plan(serializer)
            CompiledRepresentationMixin._nullable_paths[cls] = frozenset(
                field.field_name
                for field in serializer._readable_fields
                if field.field_name and len(field.source_attrs) > 1 and _null_answers_none(field)
            )
            CompiledRepresentationMixin._compiled_plans[cls] = plan
            return plan

    @classmethod
    def row_lookups(cls) -> list[str]:
        """The ``values()`` lookups whose rows ``represent_rows`` answers."""
        plan = cls._plan()
        if plan is None:
            raise TypeError(f"{cls.__name__} cannot be compiled to answer rows")
        return ["__".join(attrs) for _, attrs, _ in plan]

    @classmethod
    def represent_rows(cls, rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Answer ``values()`` rows exactly as ``to_representation`` answers their objects."""
        zone = timezone.get_current_timezone()
        plan = cls._plan()
        if plan is None:
            raise TypeError(f"{cls.__name__} cannot be compiled to answer rows")
        fields = [(name, "__".join(attrs), convert) for name, attrs, convert in _bound(plan, zone)]
        return [
            {
                name: None if (value := row[lookup]) is None else convert(value)
                for name, lookup, convert in fields
            }
            for row in rows
        ]

    def to_representation(self, instance: Any) -> dict[str, Any]:
        plan = type(self)._plan(self)
        if plan is None or isinstance(instance, Mapping):
            return super().to_representation(instance)  # type: ignore[misc]
        nullable = CompiledRepresentationMixin._nullable_paths[type(self)]
        representation: dict[str, Any] = {}
        try:
            for name, attrs, convert in _bound(plan, timezone.get_current_timezone()):
                value = instance
                for attr in attrs:
                    if value is None and name in nullable:
                        break  # a null relation (a job of no array): None, as DRF answers
                    value = getattr(value, attr)
                representation[name] = None if value is None else convert(value)
        except (AttributeError, KeyError, ObjectDoesNotExist):
            # A missing related object: the generic path knows what to answer.
            return super().to_representation(instance)  # type: ignore[misc]
        self.derive(representation)
        return representation

    def derive(self, representation: dict[str, Any]) -> None:
        """Set the ``derived_fields`` of a compiled answer (none by default)."""
