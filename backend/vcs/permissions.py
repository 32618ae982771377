"""Who may administer a VC."""

from __future__ import annotations

from backend.vcs.models import Membership, Role


def is_vc_admin(user: object, vc_id: int) -> bool:
    """Cluster admins administer every VC; VC admins their own."""
    if not getattr(user, "is_authenticated", False):
        return False
    if user.is_staff:  # type: ignore[attr-defined]
        return True
    return Membership.objects.filter(user=user, vc_id=vc_id, role=Role.ADMIN).exists()


def is_vc_member(user: object, vc_id: int) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if user.is_staff:  # type: ignore[attr-defined]
        return True
    return Membership.objects.filter(user=user, vc_id=vc_id).exists()
