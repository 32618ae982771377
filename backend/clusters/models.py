"""What the cluster is made of: GPU types (SKUs) with their t-shirt sizes, and nodes."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from backend.core.querysets import ClusterWideQuerySet
from repairmanager import states

CPU_ONLY_GPU_TYPE = "cpu"


class GpuType(models.Model):
    """A GPU SKU such as ``A100``; ``cpu`` names CPU-only nodes.

    The t-shirt size (CPU cores and memory per GPU) sizes a worker whose submission leaves
    CPU or memory out, so that GPUs are never starved of host resources.
    """

    name = models.SlugField(max_length=40, unique=True)
    cpus_per_gpu = models.DecimalField(
        max_digits=8, decimal_places=3, validators=[MinValueValidator(Decimal("0.001"))]
    )
    memory_per_gpu = models.PositiveIntegerField(help_text="MiB of host memory per GPU.")

    objects = ClusterWideQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_cpu_only(self) -> bool:
        return self.name == CPU_ONLY_GPU_TYPE


# The repair cycle's states, as model choices: defined once, in repairmanager.states.
RepairState = models.TextChoices(  # type: ignore[call-overload]  # stubs know no member list
    "RepairState", [(state.name, state.value) for state in states.RepairState]
)


class NodeQuerySet(ClusterWideQuerySet):
    """Every signed-in user may see the cluster's nodes; only cluster admins change them."""

    def schedulable(self) -> NodeQuerySet:
        return self.filter(schedulable=True, repair_state=RepairState.IN_SERVICE)


class Node(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="nodes")
    gpus = models.PositiveIntegerField()
    cpus = models.DecimalField(
        max_digits=8, decimal_places=3, validators=[MinValueValidator(Decimal("0.001"))]
    )
    memory = models.PositiveIntegerField(help_text="MiB.")
    labels = models.JSONField(default=dict, blank=True)
    schedulable = models.BooleanField(default=True, help_text="False when cordoned.")
    repair_state = models.CharField(
        max_length=20, choices=RepairState.choices, default=RepairState.IN_SERVICE
    )
    ready = models.BooleanField(
        default=True, help_text="The cluster backend reports the node ready and healthy."
    )
    ready_reason = models.CharField(max_length=300, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    removal_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="Draining to be removed: gone once no job runs there."
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Bound by a cluster admin (DLTS's VC machine hard assignment): only this VC's jobs
    # run here, and others' preemptible ones where it lends its nodes.
    dedicated_vc = models.ForeignKey(
        "vcs.VirtualCluster",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="dedicated_nodes",
        help_text="The VC the node is dedicated to; empty: shared by all.",
    )
    # Its place in the network: a gang goes under as few switches as it can
    # (jobmanager.core.topology). Set by a cluster admin or read from the backend.
    switch = models.CharField(
        max_length=100,
        blank=True,
        help_text="The network switch (or InfiniBand leaf, or block) the node hangs under; "
        "empty: not known.",
    )
    rack = models.CharField(max_length=100, blank=True, help_text="The rack it stands in.")

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
