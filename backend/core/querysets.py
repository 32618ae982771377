"""The querysets of tenant scoping: what a user may see (``"view"``) and administer
(``"administer"``) of a model, as ``visible_to(user, action)``. Models use them; the base
view that reads through them is ``backend.core.scoping.TenantScopedViewSet``. Apart from
it, so that loading the models does not load the REST framework's views (issue 33)."""

from __future__ import annotations

from typing import Literal, Protocol

from django.db.models import QuerySet

Action = Literal["view", "administer"]


class ScopedQuerySet(Protocol):
    """What every scoped model's queryset offers (test_scoping checks each viewset's)."""

    def visible_to(self, user: object, action: Action = "view") -> QuerySet: ...


class ClusterWideQuerySet(QuerySet):
    """Objects every signed-in user may see, such as the cluster's GPU types; cluster
    admins administer them."""

    def visible_to(self, user: object, action: Action = "view") -> ClusterWideQuerySet:
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if action == "administer" and not getattr(user, "is_staff", False):
            return self.none()
        return self


class ClusterAdminOnlyQuerySet(QuerySet):
    """Objects only cluster admins see and administer, such as the users."""

    def visible_to(self, user: object, action: Action = "view") -> ClusterAdminOnlyQuerySet:
        admin = getattr(user, "is_authenticated", False) and getattr(user, "is_staff", False)
        return self if admin else self.none()
