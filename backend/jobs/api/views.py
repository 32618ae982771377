"""Jobs over REST: submit, list, detail, actions one by one and in batches, events, log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from django.contrib.auth.models import User
from django.db import DatabaseError
from django.db.models import Count, QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action, api_view
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from backend.core.deadlocks import atomic_retrying_deadlocks
from backend.core.exceptions import ActionRefused
from backend.core.pagination import StandardPagination
from backend.core.permissions import IsOwner, IsVcAdmin, Rule, acting_user
from backend.core.scoping import TenantScopedViewSet
from backend.core.spreadsheets import csv_response
from backend.jobs import actions
from backend.jobs.accounting import gpu_hours
from backend.jobs.api.filters import JobFilter
from backend.jobs.api.serializers import (
    ExposedPortSerializer,
    GpuHoursQuerySerializer,
    GpuHoursSerializer,
    GpuUtilisationSerializer,
    JobActionSerializer,
    JobArrayActionResultSerializer,
    JobArraySerializer,
    JobArraySubmittedSerializer,
    JobAttemptSerializer,
    JobBatchResultSerializer,
    JobBatchSerializer,
    JobChangeSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
    JobSummarySerializer,
    LogTailQuerySerializer,
    LogTailSerializer,
    StartPreviewSerializer,
)
from backend.jobs.forecast import forecast_job
from backend.jobs.insight import job_endpoints, preview_start
from backend.jobs.logs import job_log_dir, job_log_files, read_log_chunk, stream_full_log
from backend.jobs.metrics import job_gpu_utilisation
from backend.jobs.models import Job, JobArray, JobStatus

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 200

logger = logging.getLogger(__name__)


JOB_ACTIONS: dict[str, Callable[[Job, User | None, str], Job]] = {
    "kill": actions.kill_job,
    "pause": actions.pause_job,
    "resume": actions.resume_job,
    "approve": actions.approve_job,
}

# Who may, beyond those who see the job (its owner, its VC's admins, cluster admins).
JOB_ACTION_PERMISSIONS: dict[str, tuple[type[Rule], ...]] = {
    "approve": (IsVcAdmin.saying("Only an admin of VC {vc} can approve jobs."),),
    "partial_update": (
        IsVcAdmin.saying(
            "Only an admin of VC {vc} can change a job's priority, wall time or retries."
        ),
    ),
    "ports": (IsOwner.saying("Only the job's owner may expose its ports."),),
}


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = Job.objects.all()
    serializer_class = JobSerializer
    lookup_field = "job_id"
    lookup_url_kwarg = "id"
    filterset_class = JobFilter
    ordering_fields = ["submitted_at", "started_at", "finished_at", "priority", "name", "status"]
    ordering = ["-submitted_at", "-id"]
    action_permissions = dict(JOB_ACTION_PERMISSIONS)

    def refine_queryset(self, queryset):
        return queryset.select_related("owner", "vc", "gpu_type")

    def _shown(self, job: Job) -> Response:
        """The job as its summary, read again (through the visible queryset) after a change."""
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(responses=JobSummarySerializer(many=True))
    def list(self, request: Request) -> Response:
        """Jobs I may see, newest first; filter by vc, status, owner and type. Each is a
        summary; the job's detail has its command, environment, placement and messages."""
        # A page is read as rows of exactly the columns it shows, not as model instances
        # with their owner, VC and GPU type: building those was most of a list's cost.
        jobs = self.filter_queryset(self.get_queryset())
        paginator = self.paginator
        assert isinstance(paginator, StandardPagination)  # the project's, for every list
        page = paginator.paginate_rows(jobs, JobSummarySerializer.row_lookups(), request, self)
        # list(): represent_rows takes a list of Mappings, the page is a list of dicts
        return self.get_paginated_response(JobSummarySerializer.represent_rows(list(page)))

    def filter_queryset(self, queryset):
        # Without query parameters the filters change nothing but the order, which a single
        # job does not have; building them is a good part of a detail request.
        if self.action != "list" and not self.request.query_params:
            return queryset
        return super().filter_queryset(queryset)

    @extend_schema(
        request=JobSubmitSerializer,
        responses={
            201: PolymorphicProxySerializer(
                component_name="JobSubmitted",
                serializers=[JobSerializer, JobArraySubmittedSerializer],
                resource_type_field_name=None,
            )
        },
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                location=OpenApiParameter.HEADER,
                required=False,
                description="Repeat a submission safely: the same key returns the first job.",
            )
        ],
    )
    def create(self, request: Request) -> Response:
        """Submit a job. It is committed before the answer, which carries its id."""
        key = request.headers.get(IDEMPOTENCY_HEADER) or None
        if key and len(key) > MAX_IDEMPOTENCY_KEY:
            raise ValidationError(
                {IDEMPOTENCY_HEADER: [f"At most {MAX_IDEMPOTENCY_KEY} characters."]}
            )
        if key:
            earlier = actions.find_idempotent_submission(acting_user(request), key)
            if earlier:
                return self._submitted(earlier, replayed=True)
        submission = JobSubmitSerializer(data=request.data, context={"request": request})
        submission.is_valid(raise_exception=True)
        if "task_envs" in submission.validated_data:
            if key:
                raise ValidationError(
                    {IDEMPOTENCY_HEADER: ["A job array cannot be submitted with a key."]}
                )
            array, job_ids = actions.submit_job_array(
                acting_user(request),
                submission.validated_data["job_request"],
                submission.validated_data["task_envs"],
            )
            return Response(
                {"array": array.array_id, "size": array.size, "jobs": job_ids},
                status=status.HTTP_201_CREATED,
            )
        job, created = actions.submit_job(
            acting_user(request), submission.validated_data["job_request"], idempotency_key=key
        )
        if created and job.deadline is not None and job.status == JobStatus.QUEUED:
            job = self._forecast(job)
        return self._submitted(job, replayed=not created)

    @staticmethod
    def _forecast(job: Job) -> Job:
        """The answer says whether the committed job is predicted to make its deadline;
        when the database fails it now, the job is still answered as stored (201), and the
        job manager's next forecast fills it in."""
        try:
            return forecast_job(job)
        except DatabaseError as error:
            logger.warning("job %s stored; its first forecast failed: %s", job.job_id, error)
            return job

    @extend_schema(request=JobSubmitSerializer, responses=StartPreviewSerializer)
    @action(detail=False, methods=["post"], filterset_class=None, pagination_class=None)
    def preview(self, request: Request) -> Response:
        """Whether a job would start now if submitted, and if not why and when it likely
        would: the submission's body, validated as a submission; nothing is stored."""
        submission = JobSubmitSerializer(data=request.data, context={"request": request})
        submission.is_valid(raise_exception=True)
        preview = preview_start(submission.validated_data["job_request"], acting_user(request).id)
        return Response(StartPreviewSerializer(preview).data)

    @extend_schema(responses=JobDetailSerializer)
    def retrieve(self, request: Request, id: str) -> Response:
        """The job, and while it runs an SSH command line and a VS Code link to reach it."""
        job = self.get_object()
        endpoints = job_endpoints(job, request.build_absolute_uri("/"))
        return Response(self.get_serializer(job).data | {"endpoints": endpoints})

    def _submitted(self, job: Job, replayed: bool) -> Response:
        if replayed:
            job = self.get_queryset().get(pk=job.pk)
        response = Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)
        if replayed:
            response["Idempotent-Replayed"] = "true"
        return response

    @extend_schema(request=JobChangeSerializer, responses=JobSerializer)
    def partial_update(self, request: Request, id: str) -> Response:
        """Change a job's priority, wall time (within its VC's limit) or retries (VC
        admins and cluster admins); each change is recorded as an event of the job."""
        job = self.get_object()
        change = JobChangeSerializer(data=request.data, context={"vc": job.vc})
        change.is_valid(raise_exception=True)
        job = atomic_retrying_deadlocks(  # a deadlock with the job manager's pass: again
            partial(actions.change_job, job, acting_user(request), change.validated_data)
        )
        return Response(JobSerializer(job).data)

    def _act(self, request: Request, name: str) -> Response:
        job = self.get_object()
        body = JobActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = atomic_retrying_deadlocks(  # a deadlock with the job manager's pass: again
            partial(JOB_ACTIONS[name], job, acting_user(request), body.validated_data["reason"])
        )
        return self._shown(job)

    @extend_schema(request=JobActionSerializer, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def kill(self, request: Request, id: str) -> Response:
        """Kill the job; a running job goes through `killing` while it is stopped."""
        return self._act(request, "kill")

    @extend_schema(request=JobActionSerializer, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, id: str) -> Response:
        """Release the job's resources but keep it, to resume later."""
        return self._act(request, "pause")

    @extend_schema(request=JobActionSerializer, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, id: str) -> Response:
        """Requeue a paused job."""
        return self._act(request, "resume")

    @extend_schema(request=JobActionSerializer, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, id: str) -> Response:
        """Let a job past the VC's per-user GPU limit (VC admins)."""
        return self._act(request, "approve")

    @extend_schema(request=ExposedPortSerializer, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def ports(self, request: Request, id: str) -> Response:
        """Expose one more port of the job in its owner's browser, under
        /endpoints/<job>/<name>/ (the owner only)."""
        job = self.get_object()
        body = ExposedPortSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = actions.expose_port(
            job, body.validated_data["name"], body.validated_data["port"], acting_user(request)
        )
        return self._shown(job)

    @extend_schema(request=JobBatchSerializer, responses=JobBatchResultSerializer)
    @action(detail=False, methods=["post"])
    def batch(self, request: Request) -> Response:
        """Apply one action to many jobs; each id is answered on its own."""
        body = JobBatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        name, reason = body.validated_data["action"], body.validated_data["reason"]
        visible = {
            job.job_id: job
            for job in self.get_queryset().filter(job_id__in=body.validated_data["ids"])
        }
        rules = [rule() for rule in JOB_ACTION_PERMISSIONS.get(name, ())]
        results = []
        for job_id in dict.fromkeys(body.validated_data["ids"]):
            job = visible.get(job_id)
            if job is None:
                results.append({"id": job_id, "ok": False, "error": "Not found."})
                continue
            refusal = next(filter(None, (rule.refusal(request, self, job) for rule in rules)), None)
            if refusal:
                results.append({"id": job_id, "ok": False, "error": refusal})
                continue
            try:  # a deadlock with the job manager's pass is run again, not a 503
                job = atomic_retrying_deadlocks(
                    partial(JOB_ACTIONS[name], job, acting_user(request), reason)
                )
            except ActionRefused as refused:
                results.append({"id": job_id, "ok": False, "error": refused.message})
            else:
                results.append({"id": job_id, "ok": True, "status": job.status})
        return Response({"action": name, "results": results})

    @extend_schema(responses=JobEventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request: Request, id: str) -> Response:
        """Every status change of the job, oldest first, with who and why."""
        job = self.get_object()
        return Response(JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(responses=JobAttemptSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def attempts(self, request: Request, id: str) -> Response:
        """Each run of the job: where, how long, how it ended."""
        job = self.get_object()
        return Response(JobAttemptSerializer(job.attempts.all(), many=True).data)

    @extend_schema(responses=GpuUtilisationSerializer)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def metrics(self, request: Request, id: str) -> Response:
        """GPU utilisation (%) of exactly the job's GPUs over its recent attempts, from
        Prometheus; ``available`` is false, with the reason, when there is none to show."""
        job = self.get_object()
        return Response(GpuUtilisationSerializer(job_gpu_utilisation(job)).data)

    @extend_schema(responses={(200, "text/plain"): bytes})
    @action(detail=True, methods=["get"], filterset_class=None)
    def log(self, request: Request, id: str) -> StreamingHttpResponse:
        """Download the job's full log (all workers)."""
        job = self.get_object()
        files = job_log_files(job.job_id)
        if not files:
            raise NotFound(f"Job {job.job_id} has no log yet; it appears once the job starts.")
        response = StreamingHttpResponse(stream_full_log(files), content_type="text/plain")
        response["Content-Disposition"] = f'attachment; filename="{job.job_id}.log"'
        return response

    @extend_schema(parameters=[LogTailQuerySerializer], responses=LogTailSerializer)
    @action(detail=True, methods=["get"], url_path="log/tail", filterset_class=None)
    def log_tail(self, request: Request, id: str) -> Response:
        """Follow one worker's log: without ``offset`` its last ``max_bytes``; then ask again
        with the ``next_offset`` answered for what was written since. ``complete`` is true
        once the job has ended and everything was read."""
        job = self.get_object()
        query = LogTailQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        worker = query.validated_data["worker"]
        if worker >= job.workers:
            raise ValidationError({"worker": [f"The job has workers 0 to {job.workers - 1}."]})
        chunk = read_log_chunk(
            job_log_dir(job.job_id) / f"worker-{worker}.log",
            query.validated_data.get("offset"),
            query.validated_data["max_bytes"],
        )
        return Response(
            {
                "worker": worker,
                "status": job.status,
                "text": chunk.text,
                "offset": chunk.offset,
                "next_offset": chunk.next_offset,
                "size": chunk.size,
                "complete": job.is_terminal and chunk.next_offset >= chunk.size,
            }
        )


GPU_HOURS_COLUMNS = [
    "key", "bucket", "booked_gpu_hours", "used_gpu_hours", "idle_gpu_hours",
    "borrowed_gpu_hours", "used_unavailable_reason",
]  # fmt: skip


def _gpu_hours_rows(request: Request) -> tuple[dict, list[dict]]:
    query = GpuHoursQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    asked = query.validated_data
    jobs = Job.objects.visible_to(request.user)
    if asked.get("vc"):
        jobs = jobs.filter(vc__name=asked["vc"])
    rows = gpu_hours(
        jobs,
        asked["group_by"],
        asked["since"],
        asked["until"],
        bucket=asked.get("bucket"),
        job_id=asked.get("job"),
        measure=asked["measure"],
    )
    return asked, rows


@extend_schema(parameters=[GpuHoursQuerySerializer], responses=GpuHoursSerializer)
@api_view(["GET"])
def gpu_hours_view(request: Request) -> Response:
    """Booked, used, idle and borrowed GPU-hours of the jobs one may see (one's own, a VC
    admin's VCs', all for cluster admins) per cluster, VC, user, job or GPU type. An elastic
    job's GPUs follow its resizes; its workers above min_workers are borrowed."""
    asked, rows = _gpu_hours_rows(request)
    return Response(
        {
            "group_by": asked["group_by"],
            "since": asked["since"],
            "until": asked["until"],
            "bucket": asked.get("bucket"),
            "results": rows,
        }
    )


@extend_schema(parameters=[GpuHoursQuerySerializer], responses={(200, "text/csv"): bytes})
@api_view(["GET"])
def gpu_hours_export_view(request: Request) -> HttpResponse:
    """The same rows as a CSV file."""
    _, rows = _gpu_hours_rows(request)
    return csv_response(rows, GPU_HOURS_COLUMNS, "gpu-hours.csv")


JOB_ARRAY_ACTIONS: dict[str, Callable[[JobArray, User | None, str], int]] = {
    "kill": actions.kill_job_array,
    "pause": actions.pause_job_array,
    "resume": actions.resume_job_array,
}


class JobArrayViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Job arrays: each one's tasks counted by status, and the array killed, paused or
    resumed as one. Its jobs are listed with ``GET /jobs/?array=<id>``."""

    queryset = JobArray.objects.all()
    serializer_class = JobArraySerializer
    lookup_field = "array_id"
    lookup_url_kwarg = "id"
    filterset_class = None
    ordering = ["-submitted_at", "-id"]

    def refine_queryset(self, queryset):
        return queryset.select_related("owner", "vc")

    def list(self, request: Request) -> Response:
        """Arrays I may see, newest first."""
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        assert page is not None  # the project's pagination pages every list
        _attach_counts(page, Job.objects.visible_to(request.user))
        return self.get_paginated_response(JobArraySerializer(page, many=True).data)

    def retrieve(self, request: Request, id: str) -> Response:
        """The array and its tasks counted by status."""
        array = self.get_object()
        _attach_counts([array], Job.objects.visible_to(request.user))
        return Response(JobArraySerializer(array).data)

    def _act(self, request: Request, name: str) -> Response:
        array = self.get_object()
        body = JobActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = acting_user(request)
        changed = JOB_ARRAY_ACTIONS[name](array, user, body.validated_data["reason"])
        return Response({"array": array.array_id, "action": name, "changed": changed})

    @extend_schema(request=JobActionSerializer, responses=JobArrayActionResultSerializer)
    @action(detail=True, methods=["post"])
    def kill(self, request: Request, id: str) -> Response:
        """Kill every task that has not ended."""
        return self._act(request, "kill")

    @extend_schema(request=JobActionSerializer, responses=JobArrayActionResultSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, id: str) -> Response:
        """Pause every task that runs or waits."""
        return self._act(request, "pause")

    @extend_schema(request=JobActionSerializer, responses=JobArrayActionResultSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, id: str) -> Response:
        """Requeue every paused task."""
        return self._act(request, "resume")


def _attach_counts(arrays: list[JobArray], jobs: QuerySet[Job]) -> None:
    """Each array's jobs (of ``jobs``: those the user sees) counted by status, in one
    query for them all."""
    counts: dict[int, dict[str, int]] = {array.pk: {} for array in arrays}
    rows = (
        jobs.filter(array_id__in=list(counts))
        .order_by()
        .values("array_id", "status")
        .annotate(jobs=Count("id"))
    )
    for row in rows:
        counts[row["array_id"]][row["status"]] = row["jobs"]
    for array in arrays:
        array.counts = counts[array.pk]
