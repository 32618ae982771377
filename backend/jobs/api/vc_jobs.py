"""A VC's jobs over REST: its resources per GPU type (which the VC's detail shows, added
in backend/jobs/extensions.py), and its queue and deadlines under the VC's own URL,
/vcs/{name}/queue/ and /vcs/{name}/deadlines/. The VC itself is the VCs' API's
(backend/vcs/api/)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from backend.core.scoping import TenantScopedViewSet
from backend.jobs.api.cluster import FragmentSerializer
from backend.jobs.forecast import deadline_summary
from backend.jobs.insight import vc_queue
from backend.jobs.models import JobStatus
from backend.vcs.models import VirtualCluster


class ResourcesSerializer(serializers.Serializer):
    """GPUs, CPUs (as numbers of CPUs) and memory (MiB)."""

    gpus = serializers.IntegerField()
    cpus = serializers.FloatField()
    memory = serializers.IntegerField()


class VcResourcesSerializer(serializers.Serializer):
    """A VC's quota, use, queued demand and free share of one GPU type."""

    gpu_type = serializers.CharField()
    quota = ResourcesSerializer()
    used = ResourcesSerializer()
    queued = ResourcesSerializer()
    free = ResourcesSerializer(help_text="What it may still start as guaranteed work.")
    running_jobs = serializers.IntegerField()
    queued_jobs = serializers.IntegerField()
    borrowed_gpus = serializers.IntegerField()
    cluster_idle_gpus = serializers.IntegerField(
        help_text="Idle GPUs it could borrow now, as preemptible work."
    )
    fragmentation = FragmentSerializer(many=True)


class QueuedJobSerializer(serializers.Serializer):
    """A waiting job in its VC's queue."""

    position = serializers.IntegerField()
    job_id = serializers.CharField()
    name = serializers.CharField()
    owner = serializers.CharField()
    gpu_type = serializers.CharField()
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()
    priority = serializers.IntegerField()
    preemptible = serializers.BooleanField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    status_message = serializers.CharField()
    insight_message = serializers.CharField(help_text="Why it waits, in the scheduler's words.")
    submitted_at = serializers.DateTimeField()
    not_before = serializers.DateTimeField(allow_null=True, help_text="Retry back-off until.")
    estimated_start_at = serializers.DateTimeField(allow_null=True)


class DeadlineWindowSerializer(serializers.Serializer):
    days = serializers.IntegerField(min_value=1, max_value=365, default=7)


class DeadlineSummarySerializer(serializers.Serializer):
    """How the VC's deadlines fared (jobs submitted with a deadline)."""

    since = serializers.DateTimeField()
    ended = serializers.IntegerField(help_text="Jobs with a deadline that ended since then.")
    met = serializers.IntegerField(help_text="Of those, finished successfully by it.")
    met_rate = serializers.FloatField(allow_null=True, help_text="met / ended.")
    pending = serializers.IntegerField(help_text="Jobs with a deadline waiting or running.")
    predicted_late = serializers.IntegerField(help_text="Of those, predicted to miss it.")


class VcJobsViewSet(TenantScopedViewSet):
    """The jobs of a VC, under its URL (its detail actions only: the VCs' API answers the
    rest). Scoped as the VC is: a VC one may not see answers 404."""

    queryset = VirtualCluster.objects.all()
    lookup_field = "name"
    filterset_class = None
    ordering = ["name"]
    ordering_fields = ["name"]  # as the VCs' API has it (the schema stays the same)

    @extend_schema(responses=QueuedJobSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def queue(self, request: Request, name: str) -> Response:
        """The VC's waiting jobs in the order its scheduler considers them, with why each
        waits and when it is likely to start (VC members and cluster admins)."""
        vc = self.get_object()
        return Response(QueuedJobSerializer(vc_queue(vc), many=True).data)

    @extend_schema(parameters=[DeadlineWindowSerializer], responses=DeadlineSummarySerializer)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def deadlines(self, request: Request, name: str) -> Response:
        """The share of the VC's jobs with a deadline that met it, of those that ended in
        the last ``days`` days (default 7), and how many still ahead are predicted late."""
        vc = self.get_object()
        window = DeadlineWindowSerializer(data=request.query_params)
        window.is_valid(raise_exception=True)
        summary = deadline_summary(vc, window.validated_data["days"])
        return Response(DeadlineSummarySerializer(summary).data)
