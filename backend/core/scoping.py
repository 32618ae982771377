"""Tenant scoping in one place: every scoped view reads through ``Model.objects.visible_to(user)``.

As NetBox's ``restrict()``: the model's queryset knows what a user may see, and the base view
calls it for every request. Concrete views may narrow the result with ``refine_queryset`` but
cannot replace ``get_queryset``, so an object outside the user's tenants answers 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.viewsets import GenericViewSet


class TenantScopedViewSet(GenericViewSet):
    """A viewset whose queryset is always ``queryset.visible_to(request.user)``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} must not override get_queryset; use refine_queryset instead."
            )

    def get_queryset(self) -> QuerySet:
        base = self.queryset
        assert base is not None, f"{type(self).__name__} needs a queryset"
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return base.none()
        return self.refine_queryset(base.all().visible_to(self.request.user))

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        """Narrow or annotate the visible queryset (select_related, filters by action)."""
        return queryset


class ClusterWideQuerySet(QuerySet):
    """Objects every signed-in user may see, such as the cluster's GPU types."""

    def visible_to(self, user: object) -> ClusterWideQuerySet:
        return self if getattr(user, "is_authenticated", False) else self.none()
