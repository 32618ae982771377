"""What the jobs app adds to the apps below it (backend/core/extensions.py), registered by
JobsConfig.ready(): a VC's detail shows its jobs' use per GPU type."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from backend.core.extensions import AnswerField
from backend.jobs.vc_resources import vc_resources
from backend.vcs.extensions import vc_detail_fields
from backend.vcs.models import VirtualCluster

if TYPE_CHECKING:  # the schemas load DRF only when asked for: not every process serves it
    from rest_framework.fields import Field
    from rest_framework.request import Request


def register() -> None:
    vc_detail_fields.register(
        AnswerField(name="resources", schema=_resources_schema, values=_resources)
    )


def _resources_schema() -> Field:
    from backend.jobs.api.vc_jobs import VcResourcesSerializer

    return VcResourcesSerializer(many=True)


def _resources(request: Request | None) -> Callable[[VirtualCluster], object]:
    return vc_resources
