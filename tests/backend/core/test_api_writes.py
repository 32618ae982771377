"""Every write through the API goes through a named action: no routed viewset saves or
deletes with DRF's default ``perform_*``, which would write the model directly."""

from __future__ import annotations

from rest_framework import mixins
from rest_framework.viewsets import GenericViewSet

from backend.clusters.models import GpuType
from backend.core.routers import AppRouter
from backend.urls import API_ROUTERS

# Each write the mixins route, the method a viewset may override instead, and the mixin
# default that would write the model itself.
WRITES = [
    (mixins.CreateModelMixin, "create", "perform_create"),
    (mixins.UpdateModelMixin, "update", "perform_update"),
    (mixins.UpdateModelMixin, "partial_update", "perform_update"),
    (mixins.DestroyModelMixin, "destroy", "perform_destroy"),
]


def direct_writes(routers) -> list[str]:
    """``prefix: Viewset.write`` for each routed write that would use the mixin's default."""
    found = []
    for router in routers:
        for prefix, viewset, _basename in router.registry:
            for mixin, handler, perform in WRITES:
                if not issubclass(viewset, mixin):
                    continue
                handled = getattr(viewset, handler) is not getattr(mixin, handler)
                if not handled and getattr(viewset, perform) is getattr(mixin, perform):
                    found.append(f"{prefix}: {viewset.__name__}.{handler}")
    return found


def test_every_routed_write_goes_through_an_action():
    assert direct_writes(API_ROUTERS) == []


def test_a_viewset_writing_the_model_itself_is_caught():
    class GpuTypeWriterViewSet(mixins.UpdateModelMixin, GenericViewSet):
        queryset = GpuType.objects.all()

    bad = AppRouter()
    bad.register("gpu-type-writer", GpuTypeWriterViewSet, basename="gpu-type-writer")

    assert direct_writes([bad]) == [
        "gpu-type-writer: GpuTypeWriterViewSet.update",
        "gpu-type-writer: GpuTypeWriterViewSet.partial_update",
    ]
