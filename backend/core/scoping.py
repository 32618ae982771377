"""Tenant scoping in one place: every scoped view reads through ``visible_to(user, action)``.

As NetBox's ``restrict()``: the model's queryset knows what a user may see (``"view"``)
and what they administer (``"administer"``: as a VC's or the cluster's admin), and the
base view calls it for every request. Concrete views may narrow the result with
``refine_queryset`` but cannot replace ``get_queryset`` or ``get_object``, not even
through a mixin, so an object outside the user's tenants answers 404.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from django.db.models import QuerySet
from rest_framework.permissions import BasePermission
from rest_framework.viewsets import GenericViewSet

from backend.core.querysets import ScopedQuerySet

if TYPE_CHECKING:
    from rest_framework.permissions import _SupportsHasPermission

# What a scoped view may not define, in itself or in any class it inherits before the base.
GUARDED = ("get_queryset", "get_object")


class TenantScopedViewSet(GenericViewSet):
    """A viewset whose queryset is always ``queryset.visible_to(request.user, "view")``.

    ``action_permissions`` adds permission classes for single actions (``"partial_update":
    (IsVcAdmin.saying(...),)``) to the viewset's own ``permission_classes``.
    """

    action_permissions: ClassVar[dict[str, tuple[type[BasePermission], ...]]] = {}
    queryset: QuerySet | None = None  # a queryset, never a manager

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Every class that comes before the base in the MRO, mixins included: a method
        # defined there would be called instead of the base's.
        for klass in cls.__mro__[: cls.__mro__.index(TenantScopedViewSet)]:
            for name in GUARDED:
                if name in klass.__dict__:
                    raise TypeError(
                        f"{cls.__name__} must not override {name} (its {klass.__name__} "
                        "does); use refine_queryset instead."
                    )

    def get_queryset(self) -> QuerySet:
        base = self.queryset
        assert base is not None, f"{type(self).__name__} needs a queryset"
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return base.none()
        scoped = cast(ScopedQuerySet, base.all())
        return self.refine_queryset(scoped.visible_to(self.request.user, "view"))

    def refine_queryset(self, queryset: QuerySet) -> QuerySet:
        """Narrow or annotate the visible queryset (select_related, filters by action)."""
        return queryset

    def get_permissions(self) -> list[_SupportsHasPermission]:
        extra = self.action_permissions.get(self.action or "", ())
        return [*super().get_permissions(), *(permission() for permission in extra)]
