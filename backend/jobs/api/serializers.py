"""Job submission and job views for the REST API."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from backend.accounts.actions import unix_account_of
from backend.accounts.unix import NoUnixAccount, accounts_required, home_of, run_as_of
from backend.clusters.models import GpuType
from backend.core.fields import MemoryField, StringListJSONField, StringMapJSONField
from backend.core.permissions import administers
from backend.core.representation import CompiledRepresentationMixin
from backend.jobs.accounting import BUCKETS, GROUPS
from backend.jobs.actions import MAX_EXPOSED_PORTS
from backend.jobs.admission import admission_answer, late_warning
from backend.jobs.commands import command_errors, runs_on_host
from backend.jobs.elastic import resize_warning, worker_range_errors
from backend.jobs.job_request import JobRequest, gpus_per_worker, job_request_of, worker_range
from backend.jobs.models import (
    Admission,
    FailureClass,
    Job,
    JobArray,
    JobAttempt,
    JobEvent,
    JobType,
    RetryOn,
)
from backend.jobs.paths import PATH_FIELDS, job_path_errors
from backend.jobs.submission import (
    FieldErrors,
    check_command,
    check_env,
    check_image,
    check_launch_size,
    check_name,
    check_path,
    check_request,
    duration_text,
    nodes_with_labels,
    quota_with_worker_fit,
    visible_vc_for_submission,
)
from backend.jobs.throughput import learned_curve
from backend.vcs.models import Quota, VirtualCluster
from jobmanager.core.deadlines import curve_errors

MAX_DAY_BUCKETS = 400
MAX_SPAN_DAYS = 3660

MAX_WORKERS = 1024
MIN_WALL_TIME = 60
MAX_PRIORITY = 100
MEMBER_MAX_PRIORITY = 0
MAX_LABELS = 10
MAX_LABEL_VALUE = 63
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")


class ExposedPortSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=32, help_text="Part of the URL, e.g. jupyter.")
    port = serializers.IntegerField(min_value=1024, max_value=65535)

    def validate_name(self, name: str) -> str:
        if not PORT_NAME.match(name):
            raise serializers.ValidationError(
                "Lowercase letters, digits and '-', e.g. 'jupyter' or 'tensorboard'."
            )
        return name


@extend_schema_field(ExposedPortSerializer(many=True))
class ExposedPortsJSONField(serializers.JSONField):
    """A job's exposed ports as stored: a list of {"name", "port"}."""


MAX_ARRAY_TASKS = 10_000


class JobArraySpecSerializer(serializers.Serializer):
    """Many jobs of one spec: ``count`` tasks, or one per entry of ``tasks`` (each an
    environment laid over the spec's, for sweeps). Each task gets TRAINYARD_ARRAY_INDEX."""

    count = serializers.IntegerField(min_value=1, max_value=MAX_ARRAY_TASKS, required=False)
    tasks = serializers.ListField(
        child=serializers.JSONField(),
        min_length=1,
        max_length=MAX_ARRAY_TASKS,
        required=False,
        help_text='Per-task environment overrides, e.g. [{"LR": "0.1"}, {"LR": "0.01"}].',
    )

    def validate_tasks(self, tasks: list) -> list[dict[str, str]]:
        errors: dict[str, list[str]] = {}  # by task index (JSON keys are strings)
        for index, env in enumerate(tasks):
            found = check_env(env)
            if found:
                errors[str(index)] = found
        if errors:
            raise serializers.ValidationError(errors)
        return tasks

    def validate(self, attrs: dict) -> dict:
        if ("count" in attrs) == ("tasks" in attrs):
            raise serializers.ValidationError(
                {"count": ['Give either "count" or "tasks", not both and not neither.']}
            )
        return attrs

    def task_envs(self, attrs: dict) -> list[dict[str, str]]:
        return attrs["tasks"] if "tasks" in attrs else [{} for _ in range(attrs["count"])]


class JobSubmitSerializer(serializers.Serializer):
    """What a script or the dashboard sends to start a job (or, with ``array``, many)."""

    vc = serializers.CharField(max_length=60)
    name = serializers.CharField(max_length=200, required=False, allow_blank=False)
    type = serializers.ChoiceField(choices=JobType.choices, default=JobType.BATCH)
    command = serializers.CharField(trim_whitespace=False)
    image = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    gpu_type = serializers.CharField(max_length=40, required=False)
    workers = serializers.IntegerField(
        min_value=1,
        max_value=MAX_WORKERS,
        required=False,
        help_text="Workers it asks for: 1 by default, or max_workers when that is given.",
    )
    min_workers = serializers.IntegerField(
        min_value=1,
        max_value=MAX_WORKERS,
        required=False,
        help_text="Elastic: the fewest workers it may run with (default: workers). Its VC's "
        "quota counts these as guaranteed; the workers above run on borrowed, preemptible "
        "GPUs.",
    )
    max_workers = serializers.IntegerField(
        min_value=1,
        max_value=MAX_WORKERS,
        required=False,
        help_text="Elastic: the most workers it may grow to on idle GPUs (default: workers).",
    )
    gpus_per_worker = serializers.IntegerField(min_value=0, max_value=64, required=False)
    cpus_per_worker = serializers.DecimalField(
        max_digits=8, decimal_places=3, min_value=Decimal("0.001"), required=False
    )
    memory_per_worker = MemoryField(required=False)
    env = StringMapJSONField(required=False, default=dict)
    working_dir = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    data_path = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    output_path = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    node_selector = serializers.DictField(
        child=serializers.CharField(max_length=MAX_LABEL_VALUE),
        required=False,
        default=dict,
        help_text='Run only on nodes with all of these labels, e.g. {"zone": "b"}.',
    )
    whole_nodes = serializers.BooleanField(
        default=False,
        help_text="With more than one worker: each worker gets a node of its own, all of "
        "it (its VC may ask this of every such job).",
    )
    same_switch = serializers.BooleanField(
        default=False,
        help_text="With more than one worker: all workers under one network switch; the "
        "job waits until one has room.",
    )
    ports = serializers.ListField(
        child=ExposedPortSerializer(),
        required=False,
        default=list,
        help_text="Ports of worker 0 to reach in a browser through /endpoints/<job>/<name>/.",
    )
    preemptible = serializers.BooleanField(default=False)
    priority = serializers.IntegerField(min_value=-MAX_PRIORITY, max_value=MAX_PRIORITY, default=0)
    max_retries = serializers.IntegerField(min_value=0, max_value=20, required=False)
    retry_on = serializers.ChoiceField(
        choices=RetryOn.choices,
        default=RetryOn.INFRASTRUCTURE,
        help_text="Which failures spend retries: infrastructure (and unknown causes; a user "
        "error, such as a command exiting 3, fails the job at once) or any.",
    )
    max_wall_time = serializers.IntegerField(
        min_value=MIN_WALL_TIME,
        required=False,
        help_text="Seconds; the VC's maximum when left out.",
        error_messages={"min_value": f"At least {MIN_WALL_TIME} seconds (1 min)."},
    )
    array = JobArraySpecSerializer(required=False, help_text="Submit a job array.")
    deadline = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When the job must have finished; the answer says whether it is "
        "predicted to (deadline_forecast), and the scheduler favours deadlines it can meet.",
    )

    throughput = serializers.ListField(
        child=serializers.FloatField(),
        required=False,
        max_length=MAX_WORKERS,
        help_text="Work per second (samples/s) at 1, 2, ... workers: positive, never "
        "decreasing, at most max_workers values. Left out, it is learned from the reports "
        "of the owner's earlier jobs of the same name in the VC (see the user guide).",
    )
    work = serializers.FloatField(
        required=False,
        min_value=0.0,
        help_text="The work the job needs, in the throughput's unit (samples): with a "
        "deadline and a throughput, the answer says whether it can meet it (admission).",
    )

    def validate_work(self, work: float) -> float:
        if not math.isfinite(work) or work <= 0:
            raise serializers.ValidationError("A positive number (samples).")
        return work

    def validate_vc(self, name: str):
        vc = visible_vc_for_submission(self.context["request"].user, name)
        if vc is None:
            raise serializers.ValidationError(f"No virtual cluster named {name!r} of yours.")
        return vc

    def validate_deadline(self, deadline: datetime | None) -> datetime | None:
        if deadline is not None and deadline <= timezone.now():
            raise serializers.ValidationError("The deadline has passed.")
        return deadline

    def validate_name(self, name: str) -> str:
        errors = check_name(name)
        if errors:
            raise serializers.ValidationError(errors)
        return name

    def validate_command(self, command: str) -> str:
        errors = check_command(command)
        if errors:
            raise serializers.ValidationError(errors)
        return command.strip()

    def validate_env(self, env: object) -> dict:
        errors = check_env(env)
        if errors:
            raise serializers.ValidationError(errors)
        return env  # type: ignore[return-value]

    def validate_image(self, image: str) -> str:
        errors = check_image(image.strip())
        if errors:
            raise serializers.ValidationError(errors)
        return image.strip()

    def _check_path(self, path: str) -> str:
        errors = check_path(path)
        if errors:
            raise serializers.ValidationError(errors)
        return path

    def validate_node_selector(self, selector: dict[str, str]) -> dict[str, str]:
        if len(selector) > MAX_LABELS:
            raise serializers.ValidationError(f"At most {MAX_LABELS} labels.")
        bad = [key for key in selector if len(key) > 253 or not LABEL_KEY.match(key)]
        if bad:
            raise serializers.ValidationError(
                f"Not a label name: {', '.join(map(repr, bad))} (letters, digits, '-', '_', "
                "'.', optionally after a DNS prefix and '/')."
            )
        return selector

    def validate_ports(self, ports: list[dict]) -> list[dict]:
        if len(ports) > MAX_EXPOSED_PORTS:
            raise serializers.ValidationError(f"At most {MAX_EXPOSED_PORTS} ports.")
        names = [port["name"] for port in ports]
        numbers = [port["port"] for port in ports]
        if len(set(names)) != len(names) or len(set(numbers)) != len(numbers):
            raise serializers.ValidationError("Each port and each name once.")
        return [{"name": port["name"], "port": port["port"]} for port in ports]

    validate_working_dir = _check_path
    validate_data_path = _check_path
    validate_output_path = _check_path

    def _gpu_type_name(self, attrs: dict, errors: FieldErrors) -> str | None:
        """The named GPU type, or the VC's only one (None, with an error, when it has
        several or none)."""
        vc = attrs["vc"]
        name = attrs.get("gpu_type")
        if name is None:
            names = list(
                Quota.objects.filter(vc=vc)
                .order_by("gpu_type__name")
                .values_list("gpu_type__name", flat=True)
            )
            if len(names) != 1:
                known = ", ".join(names) or "none"
                errors["gpu_type"] = [f"Name a GPU type; VC {vc.name} has quotas for: {known}."]
                return None
            name = names[0]
        return name

    def _gpu_type(self, name: str, errors: FieldErrors) -> GpuType | None:
        gpu_type = GpuType.objects.filter(name=name).order_by().first()
        if gpu_type is None:
            known = ", ".join(GpuType.objects.values_list("name", flat=True)) or "none"
            errors["gpu_type"] = [f"Unknown GPU type {name!r}; known types: {known}."]
        return gpu_type

    def _owner_and_path_errors(self, user: User, attrs: dict) -> FieldErrors:
        """The owner needs a Unix account wherever jobs run as their owners, every path
        must lie under a root the owner may use, resolved as the owner
        (backend.jobs.paths), and the owner must be able to run the command's program
        (backend.jobs.commands)."""
        account = None
        if accounts_required():
            try:
                account = unix_account_of(user)
            except NoUnixAccount as error:
                return {"unix_account": [str(error)]}
        paths = {name: attrs.get(name, "") for name in PATH_FIELDS}
        run_as = run_as_of(account) if account is not None else None
        errors = job_path_errors(user, attrs["vc"].name, home_of(account), paths, run_as)
        on_host = runs_on_host(attrs["image"])
        if on_host and (messages := command_errors(attrs["command"], attrs["env"], run_as)):
            errors["command"] = messages
        return errors

    def to_internal_value(self, data: object) -> dict:
        """The fields, each checked; when some are wrong, the rules across fields are run
        on the others too, so that one answer names every mistake."""
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as refused:
            detail = refused.detail
            if not isinstance(detail, dict) or not isinstance(data, Mapping) or "vc" in detail:
                raise
            rest = {name: data[name] for name in data if name not in detail}
            if "command" in detail:
                rest["command"] = "true"  # a stand-in: its own error is already given
            others = type(self)(data=rest, context=self.context)
            if not others.is_valid():
                for name, messages in others.errors.items():
                    detail.setdefault(name, messages)
            raise serializers.ValidationError(detail) from None

    def validate(self, attrs: dict) -> dict:
        """Every rule across fields, each failure kept: the answer names them all."""
        user = self.context["request"].user
        vc = attrs["vc"]
        errors: FieldErrors = {}
        if size_errors := check_launch_size(attrs["command"], attrs["env"]):
            errors["env"] = size_errors
        errors.update(self._owner_and_path_errors(user, attrs))
        workers, min_workers, max_workers = worker_range(attrs)
        errors.update(worker_range_errors(workers, min_workers, max_workers))
        curve = tuple(attrs.get("throughput") or ())
        if "throughput" in attrs and (curve_problems := curve_errors(curve, max_workers)):
            errors["throughput"] = curve_problems
        if curve and "work" not in attrs:
            errors["work"] = ["Give the work the job needs with its throughput."]
        gpu_type_name = self._gpu_type_name(attrs, errors)
        gpus, gpu_count_errors = gpus_per_worker(attrs.get("gpus_per_worker"), gpu_type_name)
        if gpu_count_errors:
            errors["gpus_per_worker"] = gpu_count_errors
        priority = attrs["priority"]
        if priority > MEMBER_MAX_PRIORITY and not administers(user, vc):
            errors["priority"] = [
                f"Only a VC admin can set a priority above {MEMBER_MAX_PRIORITY}."
            ]
        if gpu_type_name is None:
            raise serializers.ValidationError(errors)
        quota = None
        if not attrs["preemptible"]:
            quota = quota_with_worker_fit(
                vc,
                gpu_type_name,
                gpus,
                attrs.get("cpus_per_worker"),
                attrs.get("memory_per_worker"),
            )
        gpu_type = quota.gpu_type if quota is not None else self._gpu_type(gpu_type_name, errors)
        if gpu_type is None:
            raise serializers.ValidationError(errors)
        job_request = job_request_of(attrs, gpu_type, gpus)
        selector = job_request.node_selector
        if selector and not nodes_with_labels(gpu_type, dict(selector)):
            wanted = ", ".join(f"{key}={value}" for key, value in sorted(selector.items()))
            errors["node_selector"] = [f"No {gpu_type.name} node has the labels {wanted}."]
        # The quota guarantees an elastic job its min_workers; the rest it borrows.
        guaranteed = replace(job_request, workers=job_request.min_workers)
        for name, messages in check_request(guaranteed, quota).items():
            errors.setdefault(name, messages)
        task_envs = None
        if "array" in attrs:
            task_envs = JobArraySpecSerializer().task_envs(attrs["array"])
            task_errors = {
                str(index): size_errors
                for index, task_env in enumerate(task_envs)
                if task_env
                and (
                    size_errors := check_launch_size(
                        job_request.command, {**job_request.env, **task_env}
                    )
                )
            }
            if task_errors:
                errors["array"] = {"tasks": task_errors}  # type: ignore[assignment]
        if errors:
            raise serializers.ValidationError(errors)
        job_request = self._admitted(user, job_request)
        if task_envs is None:
            return {"job_request": job_request}
        return {"job_request": job_request, "task_envs": task_envs}

    @staticmethod
    def _admitted(user: User, job_request: JobRequest) -> JobRequest:
        """The request with its curve learned when none is given and, for a job with a
        deadline, its admission answer; a 400 naming ``deadline`` when its VC refuses it."""
        if job_request.deadline is None or job_request.work is None:
            return job_request
        if not job_request.throughput:
            curve = learned_curve(user, job_request.vc, job_request.name, job_request.max_workers)
            job_request = replace(job_request, throughput=curve)
        answer = admission_answer(job_request)
        if answer is None:
            return job_request
        if answer.refused:
            raise serializers.ValidationError({"deadline": [answer.refusal]})
        return replace(
            job_request,
            admission=answer.admission,
            admission_share=answer.share,
            earliest_finish=answer.earliest_finish,
        )


class JobSerializer(CompiledRepresentationMixin, serializers.ModelSerializer):
    """A job as the API answers it; `id` is the short readable job id.

    Compiled (see backend.core.representation): a page of jobs is most of a list's cost.
    """

    id = serializers.CharField(source="job_id", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    vc = serializers.CharField(source="vc.name", read_only=True)
    gpu_type = serializers.CharField(source="gpu_type.name", read_only=True)
    array = serializers.CharField(
        source="array.array_id", read_only=True, allow_null=True, default=None
    )
    # Blank until the job fails (a read-only field from the model would lose allow_blank).
    failure_class = serializers.ChoiceField(
        choices=FailureClass.choices, allow_blank=True, read_only=True
    )
    # JSON columns, answered as stored; the schema says what they hold.
    env = StringMapJSONField(read_only=True)
    node_selector = StringMapJSONField(
        read_only=True, help_text="Labels the node of every worker must carry."
    )
    ports = ExposedPortsJSONField(
        read_only=True,
        help_text='Ports the owner reaches in a browser: [{"name": "jupyter", "port": 8888}].',
    )
    # Blank for a job given no admission answer (no deadline, curve or work).
    admission = serializers.ChoiceField(choices=Admission.choices, allow_blank=True, read_only=True)
    throughput = serializers.ListField(
        child=serializers.FloatField(),
        read_only=True,
        help_text="Work per second at 1, 2, ... workers (declared or learned).",
    )
    warnings = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="What its owner should know: an elastic job whose command shows no "
        "checkpointing restarts from the beginning at each resize; a deadline it was "
        "admitted knowing it cannot meet.",
    )

    derived_fields = ("warnings",)

    def derive(self, representation: dict[str, Any]) -> None:
        warning = resize_warning(
            representation["command"], representation["env"] or {},
            representation["min_workers"], representation["max_workers"],
        )  # fmt: skip
        representation["warnings"] = [warning] if warning else []
        if late := late_warning(representation["admission"], representation["earliest_finish"]):
            representation["warnings"].append(late)

    class Meta:
        model = Job
        fields = [
            "id", "name", "owner", "vc", "type", "status", "status_message",
            "insight_message", "repair_message", "image", "command", "working_dir", "env",
            "workers", "gpu_type", "gpus_per_worker", "cpus_per_worker", "memory_per_worker",
            "preemptible", "priority", "max_retries", "retry_on", "retries_used",
            "max_wall_time", "data_path", "output_path", "node_selector", "whole_nodes",
            "same_switch", "ports", "placement",
            "exit_code", "failure_class", "failure_rule", "borrowing", "attempt", "not_before",
            "estimated_start_at", "submitted_at", "started_at", "finished_at", "updated_at",
            "run_as", "limits", "array", "array_index", "deadline", "deadline_forecast",
            "min_workers", "max_workers", "resizes", "throughput", "work", "admission",
            "admission_share", "earliest_finish", "warnings",
        ]  # fmt: skip
        read_only_fields = fields


class EndpointPortSerializer(serializers.Serializer):
    name = serializers.CharField()
    port = serializers.IntegerField()
    url = serializers.CharField(help_text="Open in a browser, signed in as the job's owner.")


class JobEndpointsSerializer(serializers.Serializer):
    ssh = serializers.CharField(required=False, help_text="SSH command line (running jobs).")
    ssh_config = serializers.CharField(
        required=False, help_text="A block for ~/.ssh/config (Host, HostName, Port, User)."
    )
    vscode = serializers.CharField(required=False, help_text="VS Code Remote-SSH link.")
    host_key_fingerprint = serializers.CharField(
        required=False, help_text="The gateway's host key (SHA256), to check on first use."
    )
    ports = EndpointPortSerializer(many=True, required=False)


class JobDetailSerializer(JobSerializer):
    """A job's detail: the job and, while it runs, how to reach it (documentation only:
    the view adds ``endpoints`` to what JobSerializer answers)."""

    endpoints = JobEndpointsSerializer(read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "endpoints"]
        read_only_fields = fields


class GpuSeriesSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    node = serializers.CharField()
    gpu = serializers.IntegerField()
    points = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2),
        help_text="[unix time, utilisation %] pairs",
    )


class GpuUtilisationSerializer(serializers.Serializer):
    available = serializers.BooleanField()
    message = serializers.CharField(help_text="Why there is nothing to show, when so.")
    step_seconds = serializers.IntegerField()
    series = GpuSeriesSerializer(many=True)
    mean = serializers.FloatField(allow_null=True, help_text="Mean utilisation (%).")


class StartPreviewSerializer(serializers.Serializer):
    can_start_now = serializers.BooleanField()
    reason = serializers.CharField(allow_null=True)
    estimated_start_at = serializers.DateTimeField(allow_null=True)


class JobSummarySerializer(JobSerializer):
    """A job as lists answer it: what a table of jobs shows. The command, environment,
    paths, placement and messages are in the job's detail (as OpenPAI and DLTS lists do),
    which also keeps a member's environment out of bulk listings."""

    class Meta(JobSerializer.Meta):
        fields = [
            "id", "name", "owner", "vc", "type", "status", "status_message", "image",
            "workers", "gpu_type", "gpus_per_worker", "cpus_per_worker", "memory_per_worker",
            "preemptible", "priority", "max_retries", "retry_on", "retries_used",
            "max_wall_time", "exit_code", "failure_class", "borrowing", "estimated_start_at",
            "submitted_at",
            "started_at", "finished_at", "updated_at", "array", "array_index", "deadline",
            "deadline_forecast",
        ]  # fmt: skip
        read_only_fields = fields


CHANGEABLE = ("priority", "max_wall_time", "max_retries")


class JobChangeSerializer(serializers.Serializer):
    """What a VC admin may change of a submitted job: any of these, at least one. The
    job's VC (in the context, ``vc``) caps the wall time."""

    priority = serializers.IntegerField(
        min_value=-MAX_PRIORITY, max_value=MAX_PRIORITY, required=False
    )
    max_wall_time = serializers.IntegerField(
        min_value=MIN_WALL_TIME,
        required=False,
        help_text="Seconds, at most the VC's max_wall_time; a running job's limit counts "
        "from its start.",
        error_messages={"min_value": f"At least {MIN_WALL_TIME} seconds (1 min)."},
    )
    max_retries = serializers.IntegerField(min_value=0, max_value=20, required=False)

    def validate_max_wall_time(self, seconds: int) -> int:
        vc: VirtualCluster = self.context["vc"]
        if seconds > vc.max_wall_time:
            raise serializers.ValidationError(
                f"VC {vc.name} allows at most {duration_text(vc.max_wall_time)} "
                f"({vc.max_wall_time} seconds); asked for {duration_text(seconds)} "
                f"({seconds} seconds)."
            )
        return seconds

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError(
                {name: ["Give priority, max_wall_time or max_retries: what to change (this "
                        "field is required without the others)."] for name in CHANGEABLE}
            )  # fmt: skip
        return attrs


class JobActionSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


BATCH_ACTIONS = ("kill", "pause", "resume", "approve")


class JobBatchSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=BATCH_ACTIONS)
    ids = serializers.ListField(
        child=serializers.CharField(max_length=16), min_length=1, max_length=500
    )
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class JobBatchItemSerializer(serializers.Serializer):
    id = serializers.CharField()
    ok = serializers.BooleanField()
    status = serializers.CharField(required=False, help_text="The job's status after the action.")
    error = serializers.CharField(required=False, help_text="Why the action was not applied.")


class JobBatchResultSerializer(serializers.Serializer):
    """POST /api/v1/jobs/batch/'s answer: one result per job id, in the order asked."""

    action = serializers.ChoiceField(choices=BATCH_ACTIONS)
    results = JobBatchItemSerializer(many=True)


class JobEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = JobEvent
        fields = ["from_status", "to_status", "actor", "reason", "created_at"]


class JobAttemptSerializer(serializers.ModelSerializer):
    nodes = StringListJSONField(read_only=True, help_text="The nodes its workers ran on.")

    class Meta:
        model = JobAttempt
        fields = [
            "number", "started_at", "ended_at", "nodes", "gpus", "exit_code", "failure_class",
            "failure_rule", "message",
        ]  # fmt: skip


class LogTailQuerySerializer(serializers.Serializer):
    worker = serializers.IntegerField(min_value=0, default=0)
    offset = serializers.IntegerField(min_value=0, required=False)
    max_bytes = serializers.IntegerField(min_value=1, max_value=1024 * 1024, default=64 * 1024)


class LogTailSerializer(serializers.Serializer):
    worker = serializers.IntegerField()
    status = serializers.CharField()
    text = serializers.CharField()
    offset = serializers.IntegerField()
    next_offset = serializers.IntegerField()
    size = serializers.IntegerField()
    complete = serializers.BooleanField()


class GpuHoursQuerySerializer(serializers.Serializer):
    """GET /api/v1/usage/gpu-hours/'s parameters."""

    group_by = serializers.ChoiceField(choices=GROUPS, default="user")
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    bucket = serializers.ChoiceField(choices=BUCKETS, required=False)
    job = serializers.CharField(required=False, max_length=16)
    vc = serializers.CharField(required=False, max_length=60)
    measure = serializers.BooleanField(
        default=True, help_text="Read utilisation from Prometheus (used and idle hours)."
    )

    def validate(self, attrs: dict) -> dict:
        now = timezone.now()
        attrs["until"] = attrs.get("until") or now
        attrs["since"] = attrs.get("since") or attrs["until"].replace(
            day=1, hour=0, minute=0, second=0, microsecond=0
        )
        if attrs["since"] >= attrs["until"]:
            raise serializers.ValidationError({"since": ["Must be before until."]})
        limit = MAX_DAY_BUCKETS if attrs.get("bucket") == "day" else MAX_SPAN_DAYS
        if attrs["until"] - attrs["since"] > timedelta(days=limit):
            raise serializers.ValidationError({"since": [f"At most {limit} days before until."]})
        return attrs


class GpuHoursRowSerializer(serializers.Serializer):
    key = serializers.CharField()
    bucket = serializers.CharField(required=False)
    booked_gpu_hours = serializers.FloatField()
    used_gpu_hours = serializers.FloatField(allow_null=True)
    idle_gpu_hours = serializers.FloatField(allow_null=True)
    borrowed_gpu_hours = serializers.FloatField()
    used_unavailable_reason = serializers.CharField()


class GpuHoursSerializer(serializers.Serializer):
    """GET /api/v1/usage/gpu-hours/'s answer: the period asked for and its rows."""

    group_by = serializers.ChoiceField(choices=GROUPS)
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket = serializers.ChoiceField(choices=BUCKETS, allow_null=True)
    results = GpuHoursRowSerializer(many=True)


class JobArraySubmittedSerializer(serializers.Serializer):
    array = serializers.CharField(help_text="The array's id.")
    size = serializers.IntegerField()
    jobs = serializers.ListField(child=serializers.CharField(), help_text="Job ids by index.")


class JobArraySerializer(serializers.ModelSerializer):
    """An array: its tasks counted by status (``counts``)."""

    id = serializers.CharField(source="array_id", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    vc = serializers.CharField(source="vc.name", read_only=True)
    counts = serializers.DictField(child=serializers.IntegerField(), read_only=True)

    class Meta:
        model = JobArray
        fields = ["id", "name", "owner", "vc", "size", "submitted_at", "counts"]
        read_only_fields = fields


class JobArrayActionResultSerializer(serializers.Serializer):
    array = serializers.CharField()
    action = serializers.CharField()
    changed = serializers.IntegerField(help_text="How many of its jobs the action changed.")
