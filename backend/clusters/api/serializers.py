from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from backend.clusters.extensions import node_fields
from backend.clusters.models import GpuType, Node
from backend.core.fields import ExtensibleSerializer, MemoryField

LABEL_KEY_MAX = 63


class GpuTypeSerializer(serializers.ModelSerializer):
    memory_per_gpu = MemoryField()
    cpus_per_gpu = serializers.DecimalField(
        max_digits=8, decimal_places=3, min_value=Decimal("0.001")
    )

    class Meta:
        model = GpuType
        fields = ["name", "cpus_per_gpu", "memory_per_gpu"]


class NodeSerializer(ExtensibleSerializer, serializers.ModelSerializer):
    # What apps above add (the jobs app: gpus_free, a node's free GPUs).
    added_fields = node_fields

    gpu_type = serializers.SlugRelatedField(slug_field="name", queryset=GpuType.objects.all())
    memory = MemoryField()
    cpus = serializers.DecimalField(max_digits=8, decimal_places=3, min_value=Decimal("0.001"))
    dedicated_vc = serializers.SlugRelatedField(
        slug_field="name",
        # The VCs' app sits above this one: its model is the one the node's field names.
        queryset=Node.dedicated_vc.field.related_model._default_manager.all(),
        allow_null=True,
        required=False,
        help_text="The VC the node is dedicated to: only its jobs run there (and other "
        "VCs' preemptible jobs if it lends its nodes); null: shared by all.",
    )

    class Meta:
        model = Node
        fields = [
            "name", "gpu_type", "gpus", "cpus", "memory", "labels", "schedulable",
            "repair_state", "ready", "ready_reason", "last_heartbeat",
            "removal_requested_at", "created_at", "dedicated_vc", "switch", "rack",
        ]  # fmt: skip
        read_only_fields = [
            "schedulable", "repair_state", "ready", "ready_reason", "last_heartbeat",
            "removal_requested_at", "created_at",
        ]  # fmt: skip

    def validate_labels(self, labels: object) -> dict[str, str]:
        if not isinstance(labels, dict):
            raise serializers.ValidationError('Give labels as an object, e.g. {"rack": "r12"}.')
        for key, value in labels.items():
            if not key or len(key) > LABEL_KEY_MAX or not isinstance(value, str):
                raise serializers.ValidationError(
                    f"Label {key!r}: keys are 1-{LABEL_KEY_MAX} characters, values strings."
                )
        return labels

    def validate(self, attrs: dict) -> dict:
        gpu_type = attrs.get("gpu_type") or getattr(self.instance, "gpu_type", None)
        gpus = attrs.get("gpus", getattr(self.instance, "gpus", 0))
        if gpu_type is not None and gpu_type.is_cpu_only and gpus:
            raise serializers.ValidationError({"gpus": ["A CPU-only node has 0 GPUs."]})
        if gpu_type is not None and not gpu_type.is_cpu_only and not gpus:
            raise serializers.ValidationError({"gpus": [f"A {gpu_type.name} node has GPUs."]})
        return attrs


class NodeUpdateSerializer(NodeSerializer):
    class Meta(NodeSerializer.Meta):
        read_only_fields = [*NodeSerializer.Meta.read_only_fields, "name"]
