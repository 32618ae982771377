"""Queue background work by task name, importing no task module: the modules that hold
tasks sit at the top of their apps, and what asks for their work sits below them."""

from __future__ import annotations

from celery import current_app


def send_task(name: str, *args: object, countdown: float | None = None) -> None:
    """Queue the task of that name, found in the app's registry (its tasks modules are
    imported by the app's autodiscovery the first time, not by an import here), so that
    eager mode runs it in place and a test may replace its ``apply_async``."""
    if name not in current_app.tasks:
        current_app.loader.import_default_modules()
    current_app.signature(name, args=args).apply_async(countdown=countdown)
