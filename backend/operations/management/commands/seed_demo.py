"""``manage.py seed_demo``: a small demo cluster with users, VCs, quotas and nodes, and,
where jobs run as their owners, the demo users' Unix accounts."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from backend.accounts.actions import unix_account_of
from backend.accounts.unix import NoUnixAccount, accounts_required
from backend.clusters.models import GpuType, Node
from backend.core.job_manager_triggers import run_job_manager_after_commit
from backend.vcs.actions import QuotaSpec, set_membership, set_vc_quotas
from backend.vcs.models import Role, VirtualCluster

GIB = 1024

GPU_TYPES = [
    # name, CPU cores per GPU, MiB of memory per GPU
    ("A100", Decimal(12), 120 * GIB),
    ("V100", Decimal(8), 60 * GIB),
    ("cpu", Decimal(2), 8 * GIB),
]
NODES = [
    # prefix, count, GPU type, GPUs, CPUs, memory (MiB)
    ("a100", 4, "A100", 8, Decimal(96), 1000 * GIB),
    ("v100", 4, "V100", 4, Decimal(32), 250 * GIB),
    ("cpu", 2, "cpu", 0, Decimal(64), 256 * GIB),
]
VCS = [
    # name, description, quotas {GPU type: GPUs (CPU-only: cores)}
    ("vision", "Computer vision research", {"A100": 16, "V100": 8}),
    ("nlp", "Language models", {"A100": 16, "V100": 8}),
    ("platform", "Data pipelines on CPU nodes", {"cpu": 0}),
]
# username, password, cluster admin, {VC: role}
DEMO_USERS = [
    ("admin", "admin-demo", True, {}),
    ("alice", "alice-demo", False, {"vision": Role.ADMIN, "platform": Role.MEMBER}),
    ("bob", "bob-demo", False, {"vision": Role.MEMBER}),
    ("carol", "carol-demo", False, {"nlp": Role.ADMIN, "platform": Role.ADMIN}),
]


class Command(BaseCommand):
    help = "Create a demo cluster (idempotent): GPU types, nodes, VCs with quotas, users."

    @transaction.atomic
    def handle(self, *args: object, **options: Any) -> None:
        gpu_types = {}
        for name, cpus, memory in GPU_TYPES:
            gpu_types[name], _ = GpuType.objects.get_or_create(
                name=name, defaults={"cpus_per_gpu": cpus, "memory_per_gpu": memory}
            )
        for prefix, count, type_name, gpus, cpus, memory in NODES:
            for index in range(1, count + 1):
                Node.objects.get_or_create(
                    name=f"{prefix}-{index:02d}",
                    defaults={
                        "gpu_type": gpu_types[type_name],
                        "gpus": gpus,
                        "cpus": cpus,
                        "memory": memory,
                        "labels": {"declared": "true", "rack": f"r{(index + 1) // 2}"},
                    },
                )
        run_job_manager_after_commit()  # the nodes may let queued jobs start
        vcs = {}
        for name, description, quotas in VCS:
            vcs[name], created = VirtualCluster.objects.get_or_create(
                name=name, defaults={"description": description}
            )
            if created:
                specs = [
                    QuotaSpec(gpu_types[t], gpus)
                    if t != "cpu"
                    else QuotaSpec(gpu_types[t], 0, Decimal(64), 256 * GIB)
                    for t, gpus in quotas.items()
                ]
                set_vc_quotas(vcs[name], specs)
        user_model = get_user_model()
        for username, password, is_admin, roles in DEMO_USERS:
            user, created = user_model.objects.get_or_create(
                username=username,
                defaults={
                    "email": f"{username}@example.com",
                    "is_staff": is_admin,
                    "is_superuser": is_admin,
                },
            )
            if created:
                user.set_password(password)
                user.save()
            for vc_name, role in roles.items():
                set_membership(vcs[vc_name], user, role)
        if accounts_required():
            self._provision_accounts(user_model)
        self.stdout.write("Demo cluster ready.")

    def _provision_accounts(self, user_model) -> None:
        """Each demo user's Unix account, found or provisioned (ty-<user>) now rather than
        on their first submission; one that cannot be had is said, not fatal."""
        for username, *_ in DEMO_USERS:
            user = user_model.objects.get(username=username)
            try:
                account = unix_account_of(user)
            except NoUnixAccount as error:
                self.stderr.write(f"{username}: no Unix account: {error}")
                continue
            self.stdout.write(f"{username}'s jobs run as {account.unix_name} (uid {account.uid})")
