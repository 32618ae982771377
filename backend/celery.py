"""The Celery app that runs Trainyard's background work (job manager, repair, storage)."""

import os

from celery import Celery
from celery.signals import beat_init, celeryd_init

from backend.core.broker import patch_kombu_redis
from backend.core.private_files import use_private_umask

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
# Celery's Django fixup runs every system check when a worker or beat loads the tasks, and
# drops what they find: it only cost the time to import every view (the URL checks).
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

patch_kombu_redis()  # a broker outage must not end the worker (backend/core/broker.py)
app = Celery("trainyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@celeryd_init.connect
@beat_init.connect
def _private_files(**kwargs) -> None:
    """A worker's and beat's files (beat's schedule, the SQLite journal) are their own."""
    use_private_umask()
