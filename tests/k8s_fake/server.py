"""An in-process Kubernetes API server, enough of one for the Kubernetes backend.

It speaks the REST protocol the official ``kubernetes`` client uses, over real HTTP on
127.0.0.1: create, get, list (label selectors), watch (chunked newline-delimited events
with resource versions, ``timeoutSeconds``, 410 Gone for a compacted history), merge
patch, replace and delete (graceful for pods) of core/v1 pods, services, nodes (and their
status) and namespaces, and networking.k8s.io/v1 network policies; errors come as ``Status``
bodies with the real server's codes. Every object created is checked against the
official OpenAPI schema (``kubernetes-validate``) and refused with 422 when it does not
pass, as a real server refuses it.

A test plays the kubelet and the node problem detector through methods: set a pod's
phase and exit code, finish a graceful deletion, set a node NotReady or give it a bad
condition, and inject failures (the Nth create of a kind fails).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

from tests.k8s_fake import streams
from tests.k8s_fake.store import (
    RESOURCES,
    ApiError,
    ApiStore,
    matches_selector,
    merge_patch,
    status_body,
)

__all__ = ["ApiError", "FakeKubernetes", "RecordedRequest", "matches_selector", "merge_patch"]


_PATH = re.compile(
    r"^/(?:api/v1|apis/networking\.k8s\.io/v1)"
    r"(?:/namespaces/(?P<namespace>[^/]+)(?=/))?"
    r"/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<subresource>status|log|exec|portforward))?$"
)
_DEFAULT_WATCH_SECONDS = 60


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: object


class FakeKubernetes(ApiStore):
    """The fake API server: its state (:class:`ApiStore`), served over HTTP on 127.0.0.1,
    and every request it received, for tests to check what was sent."""

    def __init__(self, validate: bool = True, watch_idle_close: float | None = 0.05) -> None:
        super().__init__(validate, watch_idle_close)
        self.requests: list[RecordedRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- running ------------------------------------------------------------------------

    def start(self) -> FakeKubernetes:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def requests_for(self, method: str, plural: str = "") -> list[RecordedRequest]:
        return [
            request
            for request in list(self.requests)
            if request.method == method and (not plural or f"/{plural}" in request.path)
        ]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the tests read ``fake.requests``

    @property
    def fake(self) -> FakeKubernetes:
        return self.server.fake  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._reply(400, status_body(400, "BadRequest", "the body is not JSON"))
            return
        self.fake.requests.append(RecordedRequest(method, url.path, query, body))
        match = _PATH.match(url.path)
        if match is None or match["plural"] not in RESOURCES:
            self._reply(404, status_body(404, "NotFound", f"the server could not find {url.path}"))
            return
        plural, name = match["plural"], match["name"]
        namespace = match["namespace"]
        resource = RESOURCES[plural]
        all_namespaces = namespace is None and method == "GET" and name is None
        if (
            not url.path.startswith("/api/v1/" if resource.api_version == "v1" else "/apis/")
            or (namespace is not None and not resource.namespaced)
            or (namespace is None and resource.namespaced and not all_namespaces)
        ):
            self._reply(404, status_body(404, "NotFound", f"no such path {url.path}"))
            return
        if match["subresource"] in ("exec", "portforward"):
            self._stream_subresource(match["subresource"], plural, namespace, name, url.query)
            return
        if match["subresource"] == "log" and (plural != "pods" or method != "GET"):
            self._reply(405, status_body(405, "MethodNotAllowed", f"{method} {url.path}"))
            return
        try:
            if method == "GET" and name is None and query.get("watch") in ("true", "1"):
                self._stream(plural, namespace, query)
                return
            if match["subresource"] == "log":
                self._stream_log(namespace or "", name, query)
                return
            self._reply(*self._answer(method, plural, namespace or "", name, match, query, body))
        except ApiError as error:
            self._reply(error.code, status_body(error.code, error.reason, error.message))
        except KeyError as error:
            self._reply(400, status_body(400, "BadRequest", f"missing {error}"))

    def _answer(self, method, plural, namespace, name, match, query, body) -> tuple[int, dict]:
        fake = self.fake
        if method == "GET" and name is None:
            return 200, fake.list_objects(
                plural, match["namespace"], query.get("labelSelector", "")
            )
        if method == "GET":
            return 200, fake.read(plural, namespace, name)
        if method == "POST" and name is None:
            return 201, fake.create(plural, namespace, body)
        if method == "PATCH" and name is not None:
            content_type = self.headers.get("Content-Type", "")
            if content_type not in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ):
                raise ApiError(415, "UnsupportedMediaType", f"{content_type} is not supported")
            return 200, fake.patch(plural, namespace, name, body, match["subresource"] or "")
        if method == "PUT" and name is not None:
            return 200, fake.replace(plural, namespace, name, body)
        if method == "DELETE" and name is not None:
            grace = query.get("gracePeriodSeconds")
            if grace is None and isinstance(body, dict):
                grace = body.get("gracePeriodSeconds")
            return 200, fake.delete(plural, namespace, name, None if grace is None else int(grace))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    def _stream_subresource(self, kind: str, plural: str, namespace, name, raw_query: str) -> None:
        """exec and portforward of a running pod, over WebSocket (tests/k8s_fake/streams)."""
        if plural != "pods" or not namespace or not name:
            self._reply(404, status_body(404, "NotFound", f"no {kind} here"))
            return
        try:
            pod = self.fake.read("pods", namespace, name)
        except ApiError as error:
            self._reply(error.code, status_body(error.code, error.reason, error.message))
            return
        if (pod.get("status") or {}).get("phase") != "Running":
            self._reply(400, status_body(400, "BadRequest", f"pod {name} is not running"))
            return
        query = parse_qs(raw_query)
        socket_ = streams.WebSocket.accept(self)
        if socket_ is None:
            self._reply(400, status_body(400, "BadRequest", "upgrade to a WebSocket"))
            return
        if kind == "portforward":
            ports = [int(port) for value in query.get("ports", []) for port in value.split(",")]
            streams.serve_portforward(socket_, ports)
            return
        container = pod["spec"]["containers"][0]
        env = {item["name"]: item.get("value", "") for item in container.get("env") or []}
        tty = query.get("tty", ["false"])[-1] == "true"
        streams.serve_exec(socket_, query.get("command", []), env, tty)

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream_log(self, namespace: str, name: str, query: dict[str, str]) -> None:
        """The pod log endpoint: text/plain, chunked as the container writes (``follow``)."""
        chunks = self.fake.pod_log(namespace, name, query)  # raises a refusal (400, 404)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in chunks:
                self._chunk(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def _stream(self, plural: str, namespace: str | None, query: dict[str, str]) -> None:
        timeout = float(query.get("timeoutSeconds") or _DEFAULT_WATCH_SECONDS)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        events = self.fake.watch(
            plural,
            namespace,
            query.get("labelSelector", ""),
            query.get("resourceVersion", ""),
            timeout,
        )
        try:
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped watching
