"""Query-string filters shared by the apps' filter sets."""

from __future__ import annotations

import django_filters
from django import forms

# The largest value a BIGINT primary key holds on MySQL and SQLite alike.
MAX_ID = 2**63 - 1


class IdFilter(django_filters.NumberFilter):
    """A row id: a whole number from 1 to ``MAX_ID``, else a 400 naming the parameter
    (a larger number would overflow the database driver's integer)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)
