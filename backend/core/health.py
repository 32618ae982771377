"""Health checks answered beside the web server, not behind its request workers.

    python -m backend.core.health HOST:PORT [--parent PID]

gunicorn's master starts it (``deploy/gunicorn.conf.py``) on ``TRAINYARD_HEALTH_BIND``
(default ``127.0.0.1:8001``; empty: none). A burst of slow requests that keeps every sync
worker busy delays a probe sent to the web port for as long as the burst lasts; this
process answers at once whatever they do, so that Kubernetes takes a busy pod for a busy
pod, not a dead one:

- ``/livez``: 200 while the web server's master runs (the liveness probe: restart the
  pod when it does not answer);
- ``/healthz``: 200 when the database answers as well, else 503 JSON (the readiness
  probe: send no traffic meanwhile, restart nothing).

It exits when the master it belongs to is gone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger(__name__)
PARENT_CHECK_SECONDS = 1.0


def database_status() -> tuple[int, dict]:
    """200 and ``{"status": "ok"}`` when the database answers, else 503 and why."""
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # any database failure means "not ready"
        return 503, {"status": "unavailable", "database": str(error)}
    return 200, {"status": "ok"}


class HealthHandler(BaseHTTPRequestHandler):
    server_version = "trainyard-health"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/livez":
            self._answer(200, {"status": "ok"})
        elif path == "/healthz":
            from django.db import connections

            try:
                self._answer(*database_status())
            finally:
                connections.close_all()  # this request's thread's connection
        else:
            self._answer(404, {"detail": "Not found."})

    def _answer(self, status: int, body: dict) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # probes: no access log
        return


def parse_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(bind: str, parent: int | None = None) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
    django.setup()
    server = ThreadingHTTPServer(parse_bind(bind), HealthHandler)
    server.daemon_threads = True
    if parent is not None:

        def watch_parent() -> None:
            while os.getppid() == parent:
                threading.Event().wait(PARENT_CHECK_SECONDS)
            server.shutdown()

        threading.Thread(target=watch_parent, daemon=True).start()
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bind", help="HOST:PORT")
    parser.add_argument("--parent", type=int, help="exit when this process is gone")
    args = parser.parse_args(argv)
    serve(args.bind, args.parent)


if __name__ == "__main__":
    main()
