"""Who may do what over the API, in one place: the DRF permission classes views name.

Cluster admins are staff users. A rule about an object runs once the object has been
found among those the user may see (``visible_to(user, "view")``), so that someone who
may not see it is answered 404, and someone who sees it but may not do this 403 with a
message that says who may. Each class takes its message with ``saying``; the VC rules
fill in the VC's name.
"""

from __future__ import annotations

from typing import Any, Self

from django.contrib.auth.models import User
from django.db.models import Model
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request


def is_cluster_admin(user: object) -> bool:
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_staff", False))


def acting_user(request: Request) -> User:
    """The signed-in user a view acts for; its permission classes have let only them in,
    so anyone else is refused as DRF refuses them (401/403)."""
    user = request.user
    if not isinstance(user, User):
        raise NotAuthenticated()
    return user


def administers(user: object, obj: Model) -> bool:
    """Whether ``obj`` is among what ``user`` administers (``visible_to(user, "administer")``)."""
    manager: Any = type(obj)._default_manager  # a scoped manager: it has visible_to
    return manager.visible_to(user, "administer").filter(pk=obj.pk).exists()


class Rule(BasePermission):
    """A permission class whose refusal says who may (``message``, a format string)."""

    message: str | None = None

    @classmethod
    def saying(cls, message: str) -> type[Self]:
        """The same rule, refusing with ``message``."""
        return type(cls.__name__, (cls,), {"message": message})

    def refusal(self, request: Request, view: Any, obj: Model) -> str | None:
        """None when ``obj`` is allowed, else the message (for views answering per object)."""
        if self.has_object_permission(request, view, obj):
            return None
        return self.message or "You do not have permission to perform this action."


class IsClusterAdmin(Rule):
    """Cluster admins only, checked before the object is looked up."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_cluster_admin(request.user)


class IsClusterAdminOrReadOnly(IsClusterAdmin):
    """Everyone the view lets in reads; cluster admins write."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.method in SAFE_METHODS or super().has_permission(request, view)


class IsClusterAdminOnceFound(Rule):
    """Cluster admins only, checked on the object once found: one who cannot see a VC's
    object is answered 404, as for every other rule about it."""

    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        return is_cluster_admin(request.user)


class IsClusterAdminOnceFoundOrReadOnly(IsClusterAdminOnceFound):
    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        return request.method in SAFE_METHODS or super().has_object_permission(request, view, obj)


class IsVcAdmin(Rule):
    """Admins of the object's VC (a VC, or an object with a ``vc``) and cluster admins.
    The message may name the VC: ``"Only an admin of VC {vc} can approve jobs."``."""

    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        if administers(request.user, obj):
            return True
        if self.message:
            vc: Any = getattr(obj, "vc", obj)
            self.message = self.message.format(vc=vc.name)
        return False


class IsVcAdminOrReadOnly(IsVcAdmin):
    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        return request.method in SAFE_METHODS or super().has_object_permission(request, view, obj)


class IsOwner(Rule):
    """The object's owner alone (``obj.owner_id``), not even an admin."""

    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        return getattr(obj, "owner_id", None) == request.user.pk
