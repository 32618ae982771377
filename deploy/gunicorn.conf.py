"""gunicorn settings for Trainyard's web server.

    gunicorn -c deploy/gunicorn.conf.py backend.wsgi

Command-line flags and GUNICORN_CMD_ARGS override what is set here.
"""

import gc
import os
import subprocess
import sys
from pathlib import Path

# Sync workers take one request at a time from the kernel's accept queue, first come first
# served; behind a load balancer or ingress (which buffers slow clients) that gives the
# steadiest latency for a CPU-bound Django app. Two per core leaves room for database waits;
# in a container, set WEB_CONCURRENCY to twice its CPU limit (os.cpu_count() sees the host).
worker_class = "sync"
workers = int(os.environ.get("WEB_CONCURRENCY", min(2 * (os.cpu_count() or 1), 8)))
timeout = 60
accesslog = "-"
# The control socket (gunicornc) of this instance: one per master under the var dir, mode
# 0600, rather than one per account in ~/.gunicorn, which two servers run by one account
# shared, each deleting the other's.
_var_dir = Path(os.environ.get("TRAINYARD_VAR_DIR") or Path(__file__).resolve().parents[1] / "var")
(_var_dir / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
control_socket = str(_var_dir / "run" / f"gunicorn-{os.getpid()}.ctl")
control_socket_mode = 0o600
# A unix socket to listen on (the front's, backend/core/front.py) is the account's alone.
umask = 0o077


# The master loads the app (and, when ready, every view) once; workers are forked from it
# with all of it loaded: a worker started after a crash answers at once, and a restarted
# server does not have each of its workers import Django side by side on the same cores.
preload_app = True


def load_every_view() -> None:
    """Load the URLconf (and with it every view and serializer) now rather than on the first
    request, then move all of it out of the garbage collector's sight: it lives as long as
    the process, and scanning it on collections costs a good part of each request's CPU."""
    from django.conf import settings
    from django.urls import get_resolver

    get_resolver(settings.ROOT_URLCONF).url_patterns  # noqa: B018 - imports every view
    gc.freeze()


def post_worker_init(worker) -> None:
    load_every_view()  # already done by the master, unless it was started without preload


# Health checks beside the request workers (backend/core/health.py): a process of its own,
# started with the master and gone with it, that asks the workers through the first
# address they listen on. TRAINYARD_HEALTH_BIND="" starts none.
_health = {}


def when_ready(server) -> None:
    if server.cfg.preload_app:
        # Before the first worker is forked, and before the health server starts: its own
        # start would take CPU from this one, which a restart after a crash waits on.
        load_every_view()
    bind = os.environ.get("TRAINYARD_HEALTH_BIND", "127.0.0.1:8001")
    if bind:
        parent, web = str(os.getpid()), server.cfg.bind[0]
        if web.startswith("fd://"):  # a socket handed down (make run's): where it listens
            web = str(server.LISTENERS[0])
        _health["process"] = subprocess.Popen(
            [sys.executable, "-m", "backend.core.health", bind, "--parent", parent, "--web", web],
            cwd=Path(__file__).resolve().parents[1],
        )


def on_exit(server) -> None:
    process = _health.get("process")
    if process is not None and process.poll() is None:
        process.terminate()
        process.wait(timeout=10)
