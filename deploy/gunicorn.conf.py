"""gunicorn settings for Trainyard's web server.

    gunicorn -c deploy/gunicorn.conf.py backend.wsgi

Command-line flags and GUNICORN_CMD_ARGS override what is set here.
"""

import gc
import os

# Sync workers take one request at a time from the kernel's accept queue, first come first
# served; behind a load balancer or ingress (which buffers slow clients) that gives the
# steadiest latency for a CPU-bound Django app. Two per core leaves room for database waits.
worker_class = "sync"
workers = int(os.environ.get("WEB_CONCURRENCY", 2 * (os.cpu_count() or 1)))
timeout = 60
accesslog = "-"


def post_worker_init(worker) -> None:
    """Move everything loaded so far (Django, the app) out of the garbage collector's sight:
    it lives as long as the worker, and scanning it on every collection costs about a tenth
    of each request's CPU."""
    gc.freeze()
