from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from backend.clusters.models import GpuType
from backend.core.fields import ExtensibleSerializer, MemoryField
from backend.vcs.extensions import vc_detail_fields
from backend.vcs.models import (
    InfeasibleDeadlines,
    Membership,
    Quota,
    Role,
    SchedulingPolicy,
    VirtualCluster,
)

MAX_VC_WALL_TIME = 365 * 24 * 3600
MAX_QUOTA_CPUS = Decimal("9999999.999")  # what Quota.cpus (10 digits, 3 decimals) holds
MAX_IDLE_MINUTES = 30 * 24 * 60
IDLE_SETTINGS = [
    "idle_util_percent",
    "idle_warn_minutes",
    "idle_kill_minutes",
    "interactive_idle_warn_minutes",
    "interactive_idle_kill_minutes",
    "queue_wait_alert_minutes",
]
MAX_HALF_LIFE_HOURS = 365 * 24  # fmt: skip


class VirtualClusterSerializer(serializers.ModelSerializer):
    my_role = serializers.SerializerMethodField()

    class Meta:
        model = VirtualCluster
        fields = [
            "name", "description", "notification", "policy", "max_wall_time",
            "interactive_wall_time", "max_interactive_gpus", "default_max_retries",
            "user_gpu_limit", *IDLE_SETTINGS,
            "usage_half_life_hours", "wait_limit_hours", "created_at", "my_role",
            "lends_dedicated_nodes", "whole_nodes_for_distributed", "infeasible_deadlines",
        ]  # fmt: skip
        read_only_fields = ["created_at", "my_role"]

    @extend_schema_field(serializers.ChoiceField(choices=Role.choices, allow_null=True))
    def get_my_role(self, vc: VirtualCluster) -> str | None:
        roles: dict[int, str] = self.context.get("roles", {})
        user = self.context["request"].user
        return roles.get(vc.id) or ("admin" if user.is_staff else None)


class VirtualClusterDetailSerializer(ExtensibleSerializer, VirtualClusterSerializer):
    """A VC's detail: its settings and its resources per GPU type (documentation only:
    the views add ``resources`` to what VirtualClusterSerializer answers)."""

    # The docstring is the schema's description, kept as it was. What the detail adds to
    # VirtualClusterSerializer's fields (``resources``: its jobs' use, queued demand and
    # free share per GPU type) the jobs app registers on vc_detail_fields.
    added_fields = vc_detail_fields


class VirtualClusterCreateSerializer(serializers.ModelSerializer):
    class Meta:
        model = VirtualCluster
        fields = [
            "name", "description", "notification", "policy", "max_wall_time",
            "interactive_wall_time", "max_interactive_gpus", "default_max_retries",
            "user_gpu_limit",
        ]  # fmt: skip
        # The same bounds as a later PATCH of the settings.
        extra_kwargs = {
            "max_wall_time": {"min_value": 60, "max_value": MAX_VC_WALL_TIME},
            "interactive_wall_time": {"min_value": 60, "max_value": MAX_VC_WALL_TIME},
            "max_interactive_gpus": {"max_value": 100000},
            "default_max_retries": {"max_value": 20},
            "user_gpu_limit": {"max_value": 100000},
        }


class VirtualClusterSettingsSerializer(serializers.Serializer):
    """The settings a VC admin may change (all optional, as in a PATCH)."""

    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    notification = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    policy = serializers.ChoiceField(choices=SchedulingPolicy.choices, required=False)
    max_wall_time = serializers.IntegerField(
        min_value=60, max_value=MAX_VC_WALL_TIME, required=False
    )
    interactive_wall_time = serializers.IntegerField(
        min_value=60,
        max_value=MAX_VC_WALL_TIME,
        required=False,
        help_text="Wall time of an interactive job submitted without one (seconds).",
    )
    max_interactive_gpus = serializers.IntegerField(min_value=0, max_value=100000, required=False)
    default_max_retries = serializers.IntegerField(min_value=0, max_value=20, required=False)
    lends_dedicated_nodes = serializers.BooleanField(required=False)
    whole_nodes_for_distributed = serializers.BooleanField(
        required=False,
        help_text="Every job of more than one worker gets whole nodes: each worker a node "
        "of its own, all of it.",
    )
    user_gpu_limit = serializers.IntegerField(
        min_value=0, max_value=100000, required=False, allow_null=True
    )
    infeasible_deadlines = serializers.ChoiceField(
        choices=InfeasibleDeadlines.choices,
        required=False,
        help_text="A job whose deadline its throughput curve says it cannot meet: "
        "refused (400), accepted best-effort, or accepted and flagged.",
    )
    idle_util_percent = serializers.IntegerField(min_value=0, max_value=100, required=False)
    idle_warn_minutes = serializers.IntegerField(
        min_value=1, max_value=MAX_IDLE_MINUTES, required=False, allow_null=True
    )
    idle_kill_minutes = serializers.IntegerField(
        min_value=0, max_value=MAX_IDLE_MINUTES, required=False
    )
    interactive_idle_warn_minutes = serializers.IntegerField(
        min_value=1, max_value=MAX_IDLE_MINUTES, required=False, allow_null=True
    )
    interactive_idle_kill_minutes = serializers.IntegerField(
        min_value=0, max_value=MAX_IDLE_MINUTES, required=False
    )
    queue_wait_alert_minutes = serializers.IntegerField(
        min_value=1, max_value=MAX_IDLE_MINUTES, required=False, allow_null=True
    )
    usage_half_life_hours = serializers.IntegerField(
        min_value=1, max_value=MAX_HALF_LIFE_HOURS, required=False
    )
    wait_limit_hours = serializers.IntegerField(
        min_value=1, max_value=MAX_HALF_LIFE_HOURS, required=False, allow_null=True
    )

    def validate(self, attrs: dict) -> dict:
        unknown = set(self.initial_data) - set(self.fields)
        if unknown:
            raise serializers.ValidationError(
                {name: ["Not a VC setting."] for name in sorted(unknown)}
            )
        return attrs


class QuotaSerializer(serializers.Serializer):
    gpu_type = serializers.CharField(max_length=40)
    gpus = serializers.IntegerField(min_value=0, max_value=1_000_000)
    cpus = serializers.DecimalField(
        max_digits=10, decimal_places=3, min_value=Decimal(0), required=False
    )
    memory = MemoryField(required=False)

    def validate_gpu_type(self, name: str) -> GpuType:
        gpu_type = GpuType.objects.filter(name=name).first()
        if gpu_type is None:
            raise serializers.ValidationError(f"Unknown GPU type {name!r}.")
        return gpu_type

    def validate(self, attrs: dict) -> dict:
        if "cpus" not in attrs:
            implied = attrs["gpu_type"].cpus_per_gpu * attrs["gpus"]
            if implied > MAX_QUOTA_CPUS:
                raise serializers.ValidationError(
                    {"gpus": [f"That implies {implied} CPUs, more than a quota holds."]}
                )
        return attrs


class QuotaListSerializer(serializers.ListSerializer):
    child = QuotaSerializer()

    def validate(self, quotas: list[dict]) -> list[dict]:
        names = [quota["gpu_type"].name for quota in quotas]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise serializers.ValidationError(
                f"Each GPU type may appear once; repeated: {', '.join(duplicates)}."
            )
        return quotas


class QuotaOutSerializer(serializers.ModelSerializer):
    gpu_type = serializers.CharField(source="gpu_type.name")

    class Meta:
        model = Quota
        fields = ["gpu_type", "gpus", "cpus", "memory"]


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")
    email = serializers.EmailField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "email", "role", "created_at"]
        read_only_fields = ["created_at"]


class MembershipChangeSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)

    def validate_username(self, username: str):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise serializers.ValidationError(f"No active user named {username!r}.")
        return user
