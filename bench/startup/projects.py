"""The two projects the start-up benchmark starts: Trainyard, and a bare Django + DRF (+
Celery) project generated at run time with ``django-admin startproject`` from the same
virtual environment, so the same versions of everything, on the same SQLite and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

BARE_SETTINGS = """
INSTALLED_APPS += ["rest_framework", "rest_framework.authtoken"]
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"],
}
CELERY_BROKER_URL = os.environ["REDIS_URL"]
CELERY_BEAT_SCHEDULE = {"cleanup": {"task": "celery.backend_cleanup", "schedule": 60.0}}
"""
BARE_CELERY = """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bare.settings")
app = Celery("bare")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""
BARE_URLS = """
from django.contrib.auth.models import User
from rest_framework.response import Response
from rest_framework.views import APIView


class Health(APIView):
    authentication_classes = permission_classes = ()

    def get(self, request):
        return Response({"database": User.objects.exists()})


urlpatterns.append(path("healthz", Health.as_view()))
"""


@dataclass
class Project:
    """A project to start: where, with which environment, and its names for things."""

    name: str
    directory: Path
    env: dict[str, str]
    package: str  # the Django project's package: its wsgi and Celery app

    def python(self, *argv: str) -> str:
        """Run ``python argv`` in the project; its standard output (fails loudly)."""
        done = subprocess.run(
            [sys.executable, *argv], cwd=self.directory, env=self.env, capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(argv)}:\n{done.stderr[-3000:]}")
        return done.stdout


def base_env(redis_url: str) -> dict[str, str]:
    """This environment without the database, broker and settings it may name, and
    writing bytecode caches as an installed system does (a session here may forbid it,
    and then every start compiles the project's own modules anew)."""
    dropped = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "TRAINYARD_VAR_DIR",
               "PYTHONDONTWRITEBYTECODE")  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    return env | {"REDIS_URL": redis_url, "PATH": f"{BIN}:{env.get('PATH', '')}"}


def trainyard(workdir: Path, redis_url: str) -> Project:
    """Trainyard on an SQLite database of its own, migrated, with a user ``alice``."""
    env = base_env(redis_url) | {
        "TRAINYARD_VAR_DIR": str(workdir / "trainyard-var"),
        "TRAINYARD_BACKEND": "local",
        "XDG_CONFIG_HOME": str(workdir / "config"),
        "TRAINYARD_HEALTH_BIND": "",  # no health server beside a gunicorn started with its config
    }
    project = Project("Trainyard", REPO_ROOT, env, "backend")
    project.python("manage.py", "migrate", "--noinput", "-v0")
    return project


def bare(workdir: Path, redis_url: str) -> Project:
    """``django-admin startproject bare``, with DRF, its token app, a Celery app, a DRF
    health view at ``/healthz``; migrated, with a user ``alice``."""
    directory = workdir / "bare"
    directory.mkdir()
    subprocess.run([str(BIN / "django-admin"), "startproject", "bare", str(directory)],
                   check=True, timeout=120)  # fmt: skip
    package = directory / "bare"
    settings = package / "settings.py"
    settings.write_text("import os\n" + settings.read_text() + textwrap.dedent(BARE_SETTINGS))
    (package / "celery.py").write_text(textwrap.dedent(BARE_CELERY).lstrip())
    (package / "__init__.py").write_text("from .celery import app as celery_app\n")
    urls = package / "urls.py"
    urls.write_text(urls.read_text() + textwrap.dedent(BARE_URLS))
    project = Project("bare Django + DRF", directory, base_env(redis_url), "bare")
    project.python("manage.py", "migrate", "--noinput", "-v0")
    project.python(
        "manage.py", "shell", "-c",
        "from django.contrib.auth.models import User; User.objects.create_user('alice')",
    )  # fmt: skip
    return project
