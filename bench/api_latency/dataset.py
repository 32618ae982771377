"""The benchmark's data set: a 100-node cluster, 50 VCs, 500 users and 100,000 jobs.

Filled with bulk inserts (a minute or so on two cores) and kept between runs; ``fill`` only
refills when the data is missing or when asked to.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import connection, transaction
from django.utils import timezone

from backend.clusters.models import GpuType, Node
from backend.jobs.models import Job, JobEvent, JobStatus, JobType, new_job_id
from backend.vcs.models import Membership, Quota, Role, VirtualCluster

GIB = 1024
USER_COUNT = 500
VC_COUNT = 50
JOB_COUNT = 100_000
BATCH = 2_000
USER_PREFIX = "bench-user-"
VC_PREFIX = "bench-vc-"

GPU_TYPES = [
    # name, CPU cores per GPU, MiB per GPU
    ("A100", Decimal(12), 120 * GIB),
    ("H100", Decimal(16), 200 * GIB),
    ("V100", Decimal(8), 60 * GIB),
    ("cpu", Decimal(2), 8 * GIB),
]
NODES = [
    # prefix, count, GPU type, GPUs, CPUs, memory (MiB)
    ("a100", 40, "A100", 8, Decimal(96), 1000 * GIB),
    ("h100", 20, "H100", 8, Decimal(128), 2000 * GIB),
    ("v100", 30, "V100", 4, Decimal(32), 250 * GIB),
    ("cpu", 10, "cpu", 0, Decimal(64), 256 * GIB),
]
# Final statuses of the stored jobs, with their share: mostly over, some running or waiting.
STATUS_WEIGHTS = [
    (JobStatus.FINISHED, 70.0),
    (JobStatus.FAILED, 14.0),
    (JobStatus.KILLED, 9.0),
    (JobStatus.TIMEOUT, 1.5),
    (JobStatus.QUEUED, 3.5),
    (JobStatus.UNAPPROVED, 0.5),
    (JobStatus.PAUSED, 0.5),
    (JobStatus.RUNNING, 1.0),
]
COMMANDS = [
    "python train.py --epochs 90 --lr 0.1",
    "torchrun --nproc_per_node=8 train_llm.py --config configs/7b.yaml",
    "python -m finetune --model bert-base --data /data/glue/sst2",
    "bash scripts/eval.sh checkpoints/latest",
    "python preprocess.py --shards 256",
]
IMAGES = ["pytorch/pytorch:2.4.0-cuda12.1", "nvcr.io/nvidia/pytorch:24.05-py3", ""]


@dataclass(frozen=True)
class DatasetSize:
    users: int
    vcs: int
    jobs: int
    events: int
    nodes: int


def current_size() -> DatasetSize:
    return DatasetSize(
        users=get_user_model().objects.filter(username__startswith=USER_PREFIX).count(),
        vcs=VirtualCluster.objects.filter(name__startswith=VC_PREFIX).count(),
        jobs=Job.objects.count(),
        events=JobEvent.objects.count(),
        nodes=Node.objects.count(),
    )


def is_filled() -> bool:
    size = current_size()
    return size.users == USER_COUNT and size.vcs == VC_COUNT and size.jobs >= JOB_COUNT


def _clear() -> None:
    """Empty every table the data set fills (a benchmark database only)."""
    tables = [
        "jobs_jobevent",
        "jobs_jobattempt",
        "jobs_job",
        "accounts_apitoken",
        "accounts_sshkey",
        "accounts_allowedip",
        "vcs_membership",
        "vcs_quota",
        "vcs_virtualcluster",
        "clusters_node",
        "clusters_gputype",
    ]
    with connection.cursor() as cursor:
        cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
        for table in tables:
            cursor.execute(f"TRUNCATE TABLE {table}")
        cursor.execute("DELETE FROM auth_user")
        cursor.execute("SET FOREIGN_KEY_CHECKS = 1")


def _placement(rng: random.Random, job: Job, nodes: list[Node]) -> list[dict]:
    candidates = [node for node in nodes if node.gpu_type_id == job.gpu_type_id]
    return [
        {
            "node": rng.choice(candidates).name,
            "gpus": list(range(job.gpus_per_worker)),
            "cpus": float(job.cpus_per_worker),
            "memory": job.memory_per_worker,
        }
        for _ in range(job.workers)
    ]


def _job(
    rng: random.Random,
    owner_id: int,
    vc_id: int,
    gpu_type: GpuType,
    nodes: list[Node],
    statuses: list[str],
    weights: list[float],
    now,
    job_ids: set[str],
) -> Job:
    job_id = new_job_id()
    while job_id in job_ids:
        job_id = new_job_id()
    job_ids.add(job_id)
    workers = rng.choice([1, 1, 1, 1, 2, 4])
    gpus = 0 if gpu_type.is_cpu_only else rng.choice([1, 1, 2, 4, 8])
    units = max(gpus, 1)
    status = rng.choices(statuses, weights)[0]
    submitted = now - timedelta(seconds=rng.uniform(0, 180 * 24 * 3600))
    job = Job(
        job_id=job_id,
        owner_id=owner_id,
        vc_id=vc_id,
        name=f"exp-{rng.randrange(10_000):04d}",
        type=rng.choices([JobType.BATCH, JobType.DISTRIBUTED, JobType.INTERACTIVE], [8, 3, 1])[0],
        image=rng.choice(IMAGES),
        command=rng.choice(COMMANDS),
        env={"LR": "0.1", "SEED": str(rng.randrange(100))} if rng.random() < 0.5 else {},
        workers=workers,
        gpus_per_worker=gpus,
        cpus_per_worker=gpu_type.cpus_per_gpu * units,
        memory_per_worker=gpu_type.memory_per_gpu * units,
        gpu_type=gpu_type,
        preemptible=rng.random() < 0.2,
        priority=0,
        max_retries=3,
        max_wall_time=7 * 24 * 3600,
        output_path="/data/outputs/" + job_id if rng.random() < 0.5 else "",
        status=status,
        submitted_at=submitted,
        queued_at=submitted,
        updated_at=submitted,
    )
    if status in (JobStatus.QUEUED, JobStatus.UNAPPROVED, JobStatus.PAUSED):
        job.insight_message = "Waiting for 8 A100 GPUs; the VC's quota is in use."
        return job
    job.started_at = submitted + timedelta(seconds=rng.uniform(1, 3600))
    if status == JobStatus.RUNNING:
        job.placement = _placement(rng, job, nodes)
        job.updated_at = job.started_at
        return job
    job.finished_at = job.started_at + timedelta(seconds=rng.uniform(60, 3 * 24 * 3600))
    job.updated_at = job.finished_at
    if status == JobStatus.FINISHED:
        job.exit_code = 0
    elif status == JobStatus.FAILED:
        job.exit_code = rng.choice([1, 137, 139])
        job.failure_class = rng.choice(["user", "user", "infrastructure", "unknown"])
        job.failure_rule = "cuda-oom" if job.exit_code == 1 else "signal"
        job.insight_message = "CUDA out of memory on worker 0."
    elif status == JobStatus.KILLED:
        job.status_message = "killed by user"
    return job


def fill(seed: int = 1, log=print) -> DatasetSize:
    """Replace the benchmark data with a fresh data set."""
    rng = random.Random(seed)
    started = time.perf_counter()
    now = timezone.now()
    _clear()
    with transaction.atomic():
        gpu_types = {
            name: GpuType.objects.create(name=name, cpus_per_gpu=cpus, memory_per_gpu=memory)
            for name, cpus, memory in GPU_TYPES
        }
        nodes = Node.objects.bulk_create(
            Node(
                name=f"{prefix}-{index:03d}",
                gpu_type=gpu_types[type_name],
                gpus=gpus,
                cpus=cpus,
                memory=memory,
                labels={"rack": f"r{index // 8:02d}"},
                last_heartbeat=now,
            )
            for prefix, count, type_name, gpus, cpus, memory in NODES
            for index in range(1, count + 1)
        )
        vcs = VirtualCluster.objects.bulk_create(
            VirtualCluster(
                name=f"{VC_PREFIX}{index:02d}",
                description=f"Benchmark tenant {index}",
                # Half the VCs cap each member's guaranteed GPUs, so submissions check it.
                user_gpu_limit=64 if index % 2 else None,
            )
            for index in range(VC_COUNT)
        )
        vcs = list(VirtualCluster.objects.filter(name__startswith=VC_PREFIX).order_by("name"))
        quotas = []
        for vc in vcs:
            for name in ("A100", "H100", "V100"):
                gpus = rng.choice([16, 32, 64]) if name == "A100" else rng.choice([0, 8, 16])
                if name == "A100" or gpus:
                    gpu_type = gpu_types[name]
                    quotas.append(
                        Quota(
                            vc=vc,
                            gpu_type=gpu_type,
                            gpus=gpus,
                            cpus=gpu_type.cpus_per_gpu * gpus,
                            memory=gpu_type.memory_per_gpu * gpus,
                        )
                    )
        Quota.objects.bulk_create(quotas)
        password = make_password("bench-password")
        user_model = get_user_model()
        user_model.objects.bulk_create(
            user_model(
                username=f"{USER_PREFIX}{index:03d}",
                email=f"{USER_PREFIX}{index:03d}@example.com",
                password=password,
            )
            for index in range(USER_COUNT)
        )
        users = list(user_model.objects.filter(username__startswith=USER_PREFIX).order_by("id"))
        memberships = []
        for index, user in enumerate(users):
            home = vcs[index % VC_COUNT]
            # The first member of each VC administers it: 50 VC admins among 500 users.
            role = Role.ADMIN if index < VC_COUNT else Role.MEMBER
            memberships.append(Membership(vc=home, user=user, role=role))
            if rng.random() < 0.4:
                other = vcs[(index + rng.randrange(1, VC_COUNT)) % VC_COUNT]
                memberships.append(Membership(vc=other, user=user, role=Role.MEMBER))
        Membership.objects.bulk_create(memberships)
    log(f"  cluster, VCs, users, memberships: {time.perf_counter() - started:.1f}s")

    quota_types: dict[int, list[GpuType]] = {}
    for quota in Quota.objects.select_related("gpu_type"):
        quota_types.setdefault(quota.vc_id, []).append(quota.gpu_type)
    # Some users submit far more than others.
    activity = [rng.lognormvariate(0, 1) for _ in memberships]
    statuses = [status for status, _ in STATUS_WEIGHTS]
    weights = [weight for _, weight in STATUS_WEIGHTS]
    job_ids: set[str] = set()
    cpu_type = gpu_types["cpu"]
    for start in range(0, JOB_COUNT, BATCH):
        picks = rng.choices(memberships, activity, k=min(BATCH, JOB_COUNT - start))
        batch = []
        for membership in picks:
            gpu_type = (
                cpu_type if rng.random() < 0.05 else rng.choice(quota_types[membership.vc_id])
            )
            batch.append(
                _job(
                    rng,
                    membership.user_id,
                    membership.vc_id,
                    gpu_type,
                    nodes,
                    statuses,
                    weights,
                    now,
                    job_ids,
                )
            )
        with transaction.atomic():
            Job.objects.bulk_create(batch)
    log(f"  {JOB_COUNT} jobs: {time.perf_counter() - started:.1f}s")
    # One event per job, the submission, written by the database in one statement.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_jobevent (job_id, from_status, to_status, actor_id, actor_name,"
            " reason, created_at)"
            " SELECT j.id, '', 'queued', j.owner_id, u.username, 'submitted', j.submitted_at"
            " FROM jobs_job j JOIN auth_user u ON u.id = j.owner_id"
        )
        cursor.execute("ANALYZE TABLE jobs_job, jobs_jobevent, vcs_membership, auth_user")
        cursor.fetchall()
    log(f"  events and ANALYZE: {time.perf_counter() - started:.1f}s")
    return current_size()
