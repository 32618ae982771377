"""What the jobs app adds to the apps below it (backend/core/extensions.py), registered by
JobsConfig.ready(): a VC's detail shows its jobs' use per GPU type, a node's answer its
free GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from backend.clusters.extensions import node_fields
from backend.clusters.models import Node
from backend.core.extensions import AnswerField
from backend.jobs.capacity import node_capacities
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
    node_fields.register(
        AnswerField(
            name="gpus_free", schema=_gpus_free_schema, values=_free_gpus, after="last_heartbeat"
        )
    )


def _resources_schema() -> Field:
    from backend.jobs.api.vc_jobs import VcResourcesSerializer

    return VcResourcesSerializer(many=True)


def _resources(request: Request | None) -> Callable[[VirtualCluster], object]:
    return vc_resources


def _gpus_free_schema() -> Field:
    from rest_framework.fields import IntegerField

    return IntegerField(allow_null=True)


def _free_gpus(request: Request | None) -> Callable[[Node], int | None]:
    """Each node's free GPUs in a GET's answer (one capacity reading for all its nodes);
    null in the answer of a change."""
    if request is None or request.method != "GET":
        return lambda node: None
    free_gpus_by_node = {capacity.node.name: capacity.free_gpus for capacity in node_capacities()}
    return lambda node: free_gpus_by_node.get(node.name, 0)
