"""A model instance's fields changed and saved: the body of every ``update_*`` action."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from django.db import models

Model = TypeVar("Model", bound=models.Model)


def save_changes(instance: Model, changes: Mapping[str, object]) -> Model:
    """``instance`` with ``changes`` (field name to value) set and only those fields
    saved."""
    for name, value in changes.items():
        setattr(instance, name, value)
    instance.save(update_fields=list(changes))
    return instance
