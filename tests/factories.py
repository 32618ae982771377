"""factory_boy factories for Trainyard's models."""

from __future__ import annotations

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from backend.clusters.models import GpuType, Node
from backend.jobs.models import Job, JobStatus
from backend.vcs.models import Membership, Quota, Role, VirtualCluster

GIB = 1024
PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def saved(user, create, extracted, **kwargs):
        if create:
            user.save()


class GpuTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuType
        django_get_or_create = ["name"]

    name = "A100"
    cpus_per_gpu = Decimal(8)
    memory_per_gpu = 64 * GIB


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n:03d}")
    gpu_type = factory.SubFactory(GpuTypeFactory)
    gpus = 8
    cpus = Decimal(64)
    memory = 512 * GIB
    labels = factory.LazyFunction(dict)


class VirtualClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = VirtualCluster
        django_get_or_create = ["name"]

    name = factory.Sequence(lambda n: f"vc{n}")
    description = "A test VC"
    # The tests were written for backfill's order; the default (LAS) is tested by name.
    policy = "BF"


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    vc = factory.SubFactory(VirtualClusterFactory)
    gpu_type = factory.SubFactory(GpuTypeFactory)
    gpus = 16
    cpus = factory.LazyAttribute(lambda quota: quota.gpu_type.cpus_per_gpu * quota.gpus)
    memory = factory.LazyAttribute(lambda quota: quota.gpu_type.memory_per_gpu * quota.gpus)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    vc = factory.SubFactory(VirtualClusterFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    owner = factory.SubFactory(UserFactory)
    vc = factory.SubFactory(VirtualClusterFactory)
    gpu_type = factory.SubFactory(GpuTypeFactory)
    name = factory.Sequence(lambda n: f"job-{n}")
    command = "python train.py"
    workers = 1
    gpus_per_worker = 1
    cpus_per_worker = Decimal(8)
    memory_per_worker = 64 * GIB
    max_wall_time = 3600
    status = JobStatus.QUEUED
