"""No viewset escapes tenant scoping: every one the API routes reads through
``visible_to``, and none can replace the scoped queryset, not even through a mixin."""

from __future__ import annotations

import pytest
from rest_framework import mixins
from rest_framework.viewsets import GenericViewSet

from backend.core.routers import AppRouter
from backend.core.scoping import TenantScopedViewSet
from backend.jobs.api.serializers import JobSerializer
from backend.jobs.models import Job
from backend.urls import API_ROUTERS

pytestmark = pytest.mark.django_db


def unscoped_viewsets(routers) -> list[str]:
    """The routed viewsets that do not read through the scoped base."""
    return [
        f"{prefix}: {viewset.__name__}"
        for router in routers
        for prefix, viewset, _basename in router.registry
        if not issubclass(viewset, TenantScopedViewSet)
    ]


def test_every_routed_viewset_is_scoped():
    prefixes = [prefix for router in API_ROUTERS for prefix, _, _ in router.registry]

    assert unscoped_viewsets(API_ROUTERS) == []
    # The walk sees the whole API: each app's router, every viewset (a few named here).
    assert {"jobs", "vcs", "nodes", "users", "me/tokens", "storage/usage"} <= set(prefixes)
    # 19 registrations: "vcs" twice, the VCs' own viewset and the jobs' (a VC's queue and
    # deadlines), both scoped.
    assert len(prefixes) == 19


def test_a_new_viewset_that_bypasses_scoping_is_caught():
    class EveryJobViewSet(mixins.ListModelMixin, GenericViewSet):
        queryset = Job.objects.all()
        serializer_class = JobSerializer

    bad = AppRouter()
    bad.register("every-job", EveryJobViewSet, basename="every-job")

    assert unscoped_viewsets([*API_ROUTERS, bad]) == ["every-job: EveryJobViewSet"]


def test_a_mixin_cannot_replace_the_scoped_queryset():
    class EveryJobMixin:
        def get_queryset(self):
            return Job.objects.all()

    with pytest.raises(TypeError, match="EveryJobMixin"):

        class LeakyJobViewSet(EveryJobMixin, mixins.ListModelMixin, TenantScopedViewSet):
            queryset = Job.objects.all()


def test_a_viewset_cannot_replace_get_object():
    with pytest.raises(TypeError, match="get_object"):

        class LeakyJobViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet):
            queryset = Job.objects.all()

            def get_object(self):
                return Job.objects.get(pk=self.kwargs["pk"])


def test_a_mixin_after_the_base_changes_nothing():
    """A mixin listed after the base comes after it in the MRO too: the base's scoped
    queryset is the one used, so the class is allowed and still scoped."""

    class EveryJobMixin:
        def get_queryset(self):
            return Job.objects.all()

    class JobsViewSet(mixins.ListModelMixin, TenantScopedViewSet, EveryJobMixin):
        queryset = Job.objects.all()

    assert JobsViewSet.get_queryset is TenantScopedViewSet.get_queryset
