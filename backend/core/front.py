"""The web tier's front: nginx (from Debian) before gunicorn, and what the app takes from it.

    python -m backend.core.front HOST:PORT --upstream unix:/path/to/gunicorn.sock

writes an nginx configuration under ``TRAINYARD_VAR_DIR/front/`` (its pid file, temporary
directories and error log there too) and replaces itself with ``nginx`` in the foreground.
``make run`` supervises it as one more child; on Kubernetes it is the web pod's ``front``
container. nginx reads each request whole, within ``HEADER_SECONDS`` for the headers and
``BODY_SECONDS`` between two reads of the body, before it hands it to a sync worker, and
takes the answer whole before it trickles it out: a slow client holds a connection of
nginx (thousands are cheap), never one of the few request workers.

gunicorn then listens on a unix socket in a directory only the portal's account can enter,
so nginx is the one client it has. nginx tells the app the client's address and port, and
the address and port the client connected to, in ``X-Trainyard-Front``, overwriting any
header of that name a client sent; ``FrontClient`` (backend/wsgi.py) believes it only from
a unix socket and makes it ``REMOTE_ADDR``/``REMOTE_PORT`` (sign-in throttling counts by
them) and ``FRONT_SERVER`` (with which /metrics finds the client socket's owner,
backend/core/local_peers.py).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

FRONT_HEADER = "X-Trainyard-Front"
FRONT_SERVER = "trainyard.front_server"  # the WSGI environ key: (address, port) as str, int
HEADER_SECONDS = 10  # the whole request line and headers
BODY_SECONDS = 10  # between two reads of the body (not the whole body)
UPSTREAM_SECONDS = 120  # gunicorn's own timeout (60 s) comes first
WORKER_CONNECTIONS = 8192


def nginx_config(bind: str, upstream: str, directory: Path, max_body_bytes: int) -> str:
    """nginx's configuration: serve ``bind`` (HOST:PORT), pass whole requests to
    ``upstream`` (``unix:/path``), keep its files under ``directory``. Bodies over
    ``max_body_bytes`` (the API's own limit) answer 413 JSON as the API does."""
    directory = directory.resolve()
    user = ""
    if os.geteuid() == 0:
        # Its workers reach the socket in the portal's private directory as the portal's
        # own account; nginx would take "nobody" otherwise.
        user = f"user {pwd.getpwuid(os.getuid()).pw_name};"
    temp = {kind: directory / kind for kind in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    too_large = f'{{"detail": "The request body is larger than {max_body_bytes} bytes."}}'
    unavailable = '{"detail": "The web server is not answering; try again shortly."}'
    return f"""# Written by backend/core/front.py at each start: edits are lost.
{user}
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile {2 * WORKER_CONNECTIONS + 64};
pid {directory / "nginx.pid"};
error_log stderr warn;
events {{ worker_connections {WORKER_CONNECTIONS}; }}
http {{
    access_log off;
    server_tokens off;
    default_type application/octet-stream;
    client_body_temp_path {temp["body"]};
    proxy_temp_path {temp["proxy"]};
    fastcgi_temp_path {temp["fastcgi"]};
    uwsgi_temp_path {temp["uwsgi"]};
    scgi_temp_path {temp["scgi"]};
    client_header_timeout {HEADER_SECONDS}s;
    client_body_timeout {BODY_SECONDS}s;
    send_timeout 60s;
    keepalive_timeout 30s;
    reset_timedout_connection on;
    client_max_body_size {max_body_bytes};
    client_body_buffer_size 1m;
    large_client_header_buffers 4 16k;
    upstream trainyard_web {{ server {upstream}; }}
    server {{
        listen {bind} backlog=4096;
        location / {{
            proxy_pass http://trainyard_web;
            proxy_set_header Host $http_host;
            proxy_set_header {FRONT_HEADER} "$remote_addr $remote_port $server_addr $server_port";
            proxy_redirect off;
            proxy_read_timeout {UPSTREAM_SECONDS}s;
            proxy_send_timeout {UPSTREAM_SECONDS}s;
        }}
        error_page 413 = @too_large;
        location @too_large {{
            default_type application/json;
            return 413 '{too_large}';
        }}
        error_page 502 504 = @unavailable;
        location @unavailable {{
            default_type application/json;
            return 503 '{unavailable}';
        }}
    }}
}}
"""


def nginx_binary() -> str:
    """Debian's nginx (in /usr/sbin, which a normal account's PATH may lack)."""
    return shutil.which("nginx") or "/usr/sbin/nginx"


def prepare(bind: str, upstream: str, directory: Path, max_body_bytes: int) -> list[str]:
    """Write the configuration and make nginx's directories; the command that runs it."""
    directory.mkdir(parents=True, exist_ok=True)
    for kind in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (directory / kind).mkdir(exist_ok=True)
    config = directory / "nginx.conf"
    config.write_text(nginx_config(bind, upstream, directory, max_body_bytes))
    # -e: the error log before the configuration is read (else /var/log/nginx, not ours).
    return [nginx_binary(), "-p", str(directory), "-c", str(config), "-e", "stderr"]


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def front_client(environ: dict[str, Any]) -> None:
    """Take the client's address and port from the front's header when the request came
    over a unix socket (only the front reaches gunicorn's); drop the header either way."""
    told = environ.pop("HTTP_" + FRONT_HEADER.upper().replace("-", "_"), None)
    connection = environ.get("gunicorn.socket")
    if told is None or connection is None or connection.family != socket.AF_UNIX:
        return
    parts = told.split()
    if len(parts) != 4 or not parts[1].isdigit() or not parts[3].isdigit():
        return
    environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = parts[0], parts[1]
    environ[FRONT_SERVER] = (parts[2], int(parts[3]))


class FrontClient:
    """WSGI middleware: ``front_client`` on every request, before Django sees it."""

    def __init__(self, application: WsgiApp) -> None:
        self.application = application

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]):
        front_client(environ)
        return self.application(environ, start_response)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bind", help="HOST:PORT that clients connect to")
    parser.add_argument("--upstream", required=True, help="gunicorn's socket: unix:/path")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backend.settings")
    from django.conf import settings

    directory = Path(settings.VAR_DIR) / "front"
    command = prepare(args.bind, args.upstream, directory, settings.TRAINYARD_MAX_JSON_BYTES)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
