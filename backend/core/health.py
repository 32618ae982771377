"""Health checks answered beside the web server, not behind its request workers.

    python -m backend.core.health HOST:PORT [--parent PID] [--web unix:/path | HOST:PORT]

gunicorn's master starts it (``deploy/gunicorn.conf.py``) on ``TRAINYARD_HEALTH_BIND``
(default ``127.0.0.1:8001``; empty: none). A burst of slow requests that keeps every sync
worker busy delays a probe sent to the web port for as long as the burst lasts; this
process answers at once whatever they do, so that Kubernetes takes a busy pod for a busy
pod, not a dead one:

- ``/livez``: 200 while the web server's master runs (the liveness probe: restart the
  pod when it does not answer);
- ``/healthz``: 200 when the database answers as well and, given ``--web`` (the address
  gunicorn listens on, which its master passes), a request worker answers a request there
  within ``WEB_ANSWER_SECONDS``; else 503 JSON (the readiness probe: send no traffic
  meanwhile, restart nothing). Workers all busy or all dead make the pod not ready.

It exits when the master it belongs to is gone.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger(__name__)
PARENT_CHECK_SECONDS = 1.0
WEB_ANSWER_SECONDS = 1.0


def database_status() -> tuple[int, dict]:
    """200 and ``{"status": "ok"}`` when the database answers, else 503 and why."""
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # any database failure means "not ready"
        return 503, {"status": "unavailable", "database": str(error)}
    return 200, {"status": "ok"}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def web_status(web: str) -> tuple[int, dict]:
    """200 when a request worker at ``web`` (``unix:/path`` or HOST:PORT) answers a
    request within WEB_ANSWER_SECONDS (any answer: a worker took it), else 503 and why."""
    if web.startswith("unix:"):
        connection: http.client.HTTPConnection = _UnixConnection(web[5:], WEB_ANSWER_SECONDS)
    else:
        host, port = parse_bind(web)
        connection = http.client.HTTPConnection(host, port, timeout=WEB_ANSWER_SECONDS)
    try:
        connection.request("GET", "/healthz", headers={"Host": "localhost"})
        connection.getresponse().read()
    except TimeoutError:
        return 503, {
            "status": "busy",
            "web": f"No request worker answered within {WEB_ANSWER_SECONDS:g} s.",
        }
    except (OSError, http.client.HTTPException) as error:
        return 503, {"status": "unavailable", "web": f"The request workers: {error}"}
    finally:
        connection.close()
    return 200, {"status": "ok"}


class HealthHandler(BaseHTTPRequestHandler):
    server_version = "trainyard-health"
    web = ""  # where the request workers listen (serve's ``web``); "" asks none

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/livez":
            self._answer(200, {"status": "ok"})
        elif path == "/healthz":
            from django.db import connections

            try:
                status, body = database_status()
            finally:
                connections.close_all()  # this request's thread's connection
            if status == 200 and self.web:
                status, body = web_status(self.web)
            self._answer(status, body)
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


def serve(bind: str, parent: int | None = None, web: str = "") -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
    django.setup()
    handler = type("BoundHealthHandler", (HealthHandler,), {"web": web})
    server = ThreadingHTTPServer(parse_bind(bind), handler)
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
    parser.add_argument("--web", default="", help="where the request workers listen")
    args = parser.parse_args(argv)
    serve(args.bind, args.parent, args.web)


if __name__ == "__main__":
    main()
