from django.apps import AppConfig


class OperationsConfig(AppConfig):
    """Commands that run or seed the whole platform (``run_trainyard``, ``seed_demo``): the
    top of the apps' order, the one app that may import every other, so ``core`` imports none."""

    name = "backend.operations"
    label = "operations"
    verbose_name = "Trainyard operations"
