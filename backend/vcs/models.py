"""Tenants: virtual clusters, their quotas per GPU type, and who belongs to them."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from backend.clusters.models import GpuType

if TYPE_CHECKING:
    from backend.core.querysets import Action


# Fair share's memory: a week, as Slurm's PriorityDecayHalfLife.
DEFAULT_USAGE_HALF_LIFE_HOURS = 7 * 24


class SchedulingPolicy(models.TextChoices):
    """The scheduling core's policies (jobmanager.core.snapshot.Policy)."""

    FIFO = "FIFO", "First in, first out"
    RUNNABLE_FIRST = "RF", "Runnable first"
    BACKFILL = "BF", "Backfill with reservations"
    LEAST_ATTAINED_SERVICE = "LAS", "Least attained service"
    FAIR_SHARE = "FS", "Fair share between users"


class InfeasibleDeadlines(models.TextChoices):
    """What happens to a job submitted with a deadline it cannot meet (issue 34)."""

    REFUSE = "refuse", "Refuse it (400)"
    BEST_EFFORT = "best_effort", "Accept it best-effort (its deadline is not favoured)"
    FLAG = "flag", "Accept it and flag it"


class Role(models.TextChoices):
    MEMBER = "member"
    ADMIN = "admin"


class VirtualClusterQuerySet(models.QuerySet):
    def visible_to(self, user: object, action: Action = "view") -> VirtualClusterQuerySet:
        """Members see their VCs, their admins administer them; cluster admins all."""
        if action == "administer":
            return self.administered_by(user)
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_staff:  # type: ignore[attr-defined]
            return self
        return self.filter(memberships__user=user)

    def administered_by(self, user: object) -> VirtualClusterQuerySet:
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_staff:  # type: ignore[attr-defined]
            return self
        return self.filter(memberships__user=user, memberships__role=Role.ADMIN)


class VirtualCluster(models.Model):
    name = models.SlugField(max_length=60, unique=True)
    description = models.TextField(blank=True)
    notification = models.TextField(blank=True, help_text="Shown as a banner to members.")
    policy = models.CharField(
        # Least attained service, fair share within its queues (jobmanager.core.snapshot's
        # DEFAULT_POLICY; docs/benchmarks.md).
        max_length=4,
        choices=SchedulingPolicy.choices,
        default=SchedulingPolicy.LEAST_ATTAINED_SERVICE,
    )
    max_wall_time = models.PositiveIntegerField(
        default=7 * 24 * 3600, help_text="Longest a job may run, in seconds."
    )
    interactive_wall_time = models.PositiveIntegerField(
        default=8 * 3600,
        help_text="Wall time of an interactive job submitted without one, in seconds (at "
        "most max_wall_time).",
    )
    max_interactive_gpus = models.PositiveIntegerField(
        default=8, help_text="GPUs the VC's interactive jobs may hold at once."
    )
    default_max_retries = models.PositiveSmallIntegerField(default=3)
    lends_dedicated_nodes = models.BooleanField(
        default=False,
        help_text="Other VCs' preemptible jobs may run on the nodes dedicated to it while "
        "it leaves them idle; its own jobs preempt them to get the nodes back.",
    )
    infeasible_deadlines = models.CharField(
        max_length=12,
        choices=InfeasibleDeadlines.choices,
        default=InfeasibleDeadlines.FLAG,
        help_text="What happens to a job whose deadline its throughput curve says it "
        "cannot meet: refused, accepted best-effort, or accepted and flagged.",
    )
    whole_nodes_for_distributed = models.BooleanField(
        default=False,
        help_text="Every job of more than one worker gets whole nodes: each worker a node "
        "of its own, all of it.",
    )
    user_gpu_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="GPUs one member's non-preemptible jobs may hold before a VC admin approves.",
    )
    # The idle watch (backend/jobmanager/idle.py): a running job whose GPUs all stay under
    # idle_util_percent for idle_warn_minutes is warned, then killed idle_kill_minutes
    # later unless they are used. Interactive jobs follow their own pair; empty: off.
    idle_util_percent = models.PositiveSmallIntegerField(
        default=5, help_text="GPU utilisation (%) under which a GPU counts as idle."
    )
    idle_warn_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Idle this long: the owner is warned. Empty: off."
    )
    idle_kill_minutes = models.PositiveIntegerField(
        default=60, help_text="Still idle this long after the warning: the job is killed."
    )
    interactive_idle_warn_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="The same for interactive jobs. Empty: off."
    )
    interactive_idle_kill_minutes = models.PositiveIntegerField(default=240)
    queue_wait_alert_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=240,
        help_text="Alert (deploy/prometheus) when a queued job waited longer. Empty: never.",
    )
    # Fair share (policy FS, and LAS within its queues): each member's past GPU-time
    # counts half as much this many hours later (backend/jobs/history.py).
    usage_half_life_hours = models.PositiveIntegerField(
        default=DEFAULT_USAGE_HALF_LIFE_HOURS,
        validators=[MinValueValidator(1)],
        help_text="Fair share: a member's past GPU-time counts half after this many hours.",
    )
    # LAS and fair share: a job queued this long in all goes first (jobmanager.core.overdue).
    wait_limit_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="LAS and fair share: a job queued this many hours in all, its waits after "
        "preemptions included, goes before every other. Empty: the cluster's default "
        "(TRAINYARD_LAS_WAIT_LIMIT_SECONDS).",
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = VirtualClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = "virtual cluster"

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """What a VC is guaranteed of one GPU type; beyond it, work borrows and is preemptible."""

    vc = models.ForeignKey(VirtualCluster, on_delete=models.CASCADE, related_name="quotas")
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="quotas")
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.DecimalField(
        max_digits=10,
        decimal_places=3,
        default=Decimal(0),
        validators=[MinValueValidator(Decimal(0))],
    )
    memory = models.PositiveBigIntegerField(default=0, help_text="MiB.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["vc", "gpu_type"], name="quota_unique_per_gpu_type")
        ]

    def __str__(self) -> str:
        return f"{self.vc} {self.gpu_type}: {self.gpus} GPUs"


class Membership(models.Model):
    vc = models.ForeignKey(VirtualCluster, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["vc", "user"], name="membership_unique_per_vc")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.vc} ({self.role})"
