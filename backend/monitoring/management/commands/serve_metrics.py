"""Serve the counters and histograms of the processes sharing this TRAINYARD_METRICS_DIR,
for a Celery worker that runs apart from the web server (its own pod on Kubernetes):

    python manage.py serve_metrics --host 0.0.0.0 --port 9808

The database's gauges are left to the web server's /metrics (``--with-database`` adds
them), so that Prometheus does not get them twice. Scrapers are let in as /metrics lets
them (TRAINYARD_METRICS_TOKEN as a bearer token, else this host's root, the portal's
account and TRAINYARD_METRICS_LOCAL_ACCOUNTS only).
"""

from __future__ import annotations

import json
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.management.base import BaseCommand, CommandParser
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from backend.monitoring.views import refusal_for, registry


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        environ["REMOTE_PORT"] = str(self.client_address[1])  # wsgiref gives the address only
        return environ

    def log_message(self, format: str, *args: object) -> None:
        pass


def metrics_app(with_database: bool):
    def app(environ, start_response):
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [b'{"detail": "Not found."}']
        refusal = refusal_for(
            environ.get("HTTP_AUTHORIZATION", ""),
            "HTTP_X_FORWARDED_FOR" in environ,
            environ.get("REMOTE_ADDR", ""),
            environ.get("REMOTE_PORT", ""),
        )
        if refusal:
            start_response("403 Forbidden", [("Content-Type", "application/json")])
            return [json.dumps({"detail": refusal}).encode()]
        body = generate_latest(registry(with_database))
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [body]

    return app


class Command(BaseCommand):
    help = "Serve this host's Trainyard processes' counters and histograms for Prometheus."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=9808)
        parser.add_argument("--with-database", action="store_true", help="the gauges too")

    def handle(self, *args: object, **options: Any) -> None:
        app = metrics_app(bool(options["with_database"]))
        server = make_server(
            str(options["host"]), int(options["port"]), app, _ThreadingServer, _QuietHandler
        )
        self.stdout.write(f"Serving metrics on http://{options['host']}:{options['port']}/metrics")
        server.serve_forever()
