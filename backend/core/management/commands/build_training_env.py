"""``manage.py build_training_env``: the shared training environment at
TRAINYARD_TRAINING_ENV, built unless it is current (``make run`` runs it first)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from backend.core.training_env import TrainingEnvError, ensure_training_env


class Command(BaseCommand):
    help = "Build the training environment every job account may use, unless it is current."

    def handle(self, *args: object, **options: Any) -> None:
        path = settings.TRAINYARD_TRAINING_ENV
        try:
            built = ensure_training_env(path, self.stdout.write)
        except TrainingEnvError as error:
            raise CommandError(f"TRAINYARD_TRAINING_ENV: {error}") from error
        if built:
            self.stdout.write(f"Training environment ready at {path}.")
