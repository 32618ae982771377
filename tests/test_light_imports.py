"""Every entry point starts without the heavy libraries it does not use (issue 33).

The Kubernetes client (with kubernetes_validate and jsonschema's format checkers, two
seconds on its own), PyTorch and asyncssh load only in the processes and code paths that
use them: a web worker, a Celery worker, a management command or the CLI on the local
backend never import them. Each case runs in a fresh interpreter and reads its
``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.servers import ROOT

HEAVY = ("kubernetes", "kubernetes_validate", "jsonschema", "torch", "asyncssh")
DJANGO = "import django; django.setup()\n"
ENTRY_POINTS = {
    # What gunicorn's master loads before it forks its workers (deploy/gunicorn.conf.py).
    "web": "import backend.wsgi\nfrom django.urls import get_resolver\n"
    "get_resolver().url_patterns\n",
    # A Celery worker or beat: the app and every app's tasks module.
    "celery": "from backend.celery import app\n" + DJANGO + "app.loader.import_default_modules()\n",
    "manage.py check": DJANGO + "from django.core.management import call_command\n"
    "call_command('check', verbosity=0)\n",
    "manage.py issue_token": DJANGO + "from django.core.management import load_command_class\n"
    "load_command_class('backend.accounts', 'issue_token')\n",
    "trainyard CLI": "import trainyard_cli.main\n",
    # The SSH gateway needs asyncssh, and nothing else heavy on the local backend.
    "ssh gateway and endpoint proxy": DJANGO + "import backend.gateway.server\n"
    "import backend.gateway.endpoints\n"
    "import backend.gateway.__main__, backend.clusters.backends, jobmanager.backends.local\n",
}
ALLOWED = {"ssh gateway and endpoint proxy": {"asyncssh"}}


def heavy_modules_loaded(
    code: str, heavy: tuple[str, ...] = HEAVY, extra_env: dict[str, str] | None = None
) -> set[str]:
    """The heavy modules in ``sys.modules`` after running ``code`` afresh."""
    probe = code + f"import sys, json\nprint(json.dumps(sorted(set({heavy!r}) & set(sys.modules))))"
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "backend.settings", "TRAINYARD_BACKEND": "local"}
    env |= extra_env or {}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_entry_points_import_no_heavy_library_they_do_not_use(entry_point):
    loaded = heavy_modules_loaded(ENTRY_POINTS[entry_point])

    assert loaded <= ALLOWED.get(entry_point, set()), f"{entry_point} imports {sorted(loaded)}"


VIEWS = ("rest_framework.viewsets", "rest_framework.serializers", "backend.urls")


@pytest.mark.parametrize("entry_point", ["models", "celery"])
def test_the_models_and_a_celery_worker_load_no_view(entry_point):
    """Django's set-up (every process's start) and a Celery worker's or beat's tasks load
    neither the REST framework's views and serializers nor the URL configuration: the
    scoped querysets live apart from the scoped base view (backend/core/querysets.py), the
    actions' exceptions apart from the API's error handler, and Celery's Django fixup runs
    no system checks (CELERY_SKIP_CHECKS)."""
    code = DJANGO if entry_point == "models" else ENTRY_POINTS["celery"]

    assert heavy_modules_loaded(code, VIEWS) == set()


def test_issue_token_loads_no_view(tmp_path):
    """``manage.py issue_token`` runs no system checks (as Django's ``createsuperuser``):
    their URL checks imported every view, for a command that writes a user and a token."""
    code = DJANGO + (
        "from django.core.management import ManagementUtility, call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "ManagementUtility(['manage.py', 'issue_token', 'alice']).execute()\n"
    )
    own_database = {"TRAINYARD_VAR_DIR": str(tmp_path), "DATABASE_URL": ""}

    assert heavy_modules_loaded(code, VIEWS, own_database) == set()
