"""The cluster's summary and its use by VC (GET /api/v1/cluster/summary/ and
/api/v1/cluster/vc-usage/): what is free and used per GPU type and per VC is made of the
jobs that run and wait, so these answers are served by the jobs app."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from backend.accounts.api.serializers import TenancySerializer
from backend.accounts.unix import tenancy
from backend.jobs.capacity import cluster_summary
from backend.jobs.vc_resources import every_vc_usage


class FragmentSerializer(serializers.Serializer):
    """One bar of a fragmentation histogram: how many schedulable nodes have k free GPUs."""

    free_gpus = serializers.IntegerField()
    nodes = serializers.IntegerField()


class ClusterRowSerializer(serializers.Serializer):
    """One GPU type of the cluster summary (CPUs as numbers of CPUs, memory in MiB)."""

    gpu_type = serializers.CharField()
    nodes = serializers.IntegerField()
    schedulable_nodes = serializers.IntegerField()
    gpus_total = serializers.IntegerField()
    gpus_used = serializers.IntegerField()
    gpus_free = serializers.IntegerField()
    cpus_total = serializers.FloatField()
    cpus_used = serializers.FloatField()
    memory_total = serializers.IntegerField()
    memory_used = serializers.IntegerField()
    fragmentation = FragmentSerializer(many=True)


class ClusterSummarySerializer(serializers.Serializer):
    """GET /api/v1/cluster/summary/'s answer."""

    gpu_types = ClusterRowSerializer(many=True)
    tenancy = TenancySerializer()


class VcUsageRowSerializer(serializers.Serializer):
    vc = serializers.CharField()
    gpu_type = serializers.CharField()
    quota_gpus = serializers.IntegerField()
    used_gpus = serializers.IntegerField()
    queued_gpus = serializers.IntegerField()


class VcUsageSerializer(serializers.Serializer):
    """GET /api/v1/cluster/vc-usage/'s answer: per VC and GPU type, aggregates only."""

    vcs = VcUsageRowSerializer(many=True)


@extend_schema(responses=ClusterSummarySerializer)
@api_view(["GET"])
def cluster_summary_view(request: Request) -> Response:
    """Per GPU type: nodes, GPUs/CPUs/memory total, used and free, and how many schedulable
    nodes have k free GPUs (the fragmentation histogram); and how tenants are kept apart
    (``tenancy``: ``multi-tenant``, or ``single-user`` when every job runs as the portal's
    own account), in words."""
    return Response(
        {"gpu_types": cluster_summary(), "tenancy": tenancy()}, status=status.HTTP_200_OK
    )


@extend_schema(responses=VcUsageSerializer)
@api_view(["GET"])
def vc_usage_view(request: Request) -> Response:
    """Per VC and GPU type: quota, GPUs in use and GPUs waiting jobs ask for (aggregates:
    no job is named), for the cluster status page."""
    return Response({"vcs": every_vc_usage()})
