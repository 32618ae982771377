"""``/endpoints/<job>/<name>/...``: a running job's exposed ports in the browser.

An aiohttp application, served by the gateway process (``TRAINYARD_ENDPOINTS_PORT``),
that proxies HTTP (long polls and streamed answers included) and WebSocket to the port a
job exposed under that name (``ports`` of its submission), on its worker 0. Only the
job's owner, signed in to the portal (the portal's session cookie, which the browser
sends to this port of the same host too), gets through; anyone else gets 404, as for a
job that does not exist. A WebSocket must come from a page of this origin (no other site
can drive it with the owner's cookie).

What reaches the job's server carries no portal cookie, and carries
``Authorization: token <TRAINYARD_ENDPOINT_TOKEN>``, a secret the job alone was given (in
its environment): Jupyter given it as ``JUPYTER_TOKEN`` (never on its command line, which
every account of the host can read), or any server that checks it, admits the proxy and
no other tenant of the host.

The proxy connects only to the address whose listening socket is the job's own (the
target's ``listener``: the gateway's forwards decide the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from asgiref.sync import sync_to_async
from django.conf import settings

from backend.gateway.ports import NotTheJobs
from backend.gateway.tokens import endpoint_token

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length", "cookie",
    "origin", "authorization", "sec-websocket-key", "sec-websocket-version",
    "sec-websocket-extensions", "sec-websocket-accept",
}  # fmt: skip
PORTAL_COOKIES = ("sessionid", "csrftoken")
CHUNK = 64 * 1024


def _owner_port(session_key: str, job_id: str, name: str) -> int | None:
    """The port the signed-in user's running job exposes as ``name``; None for anyone
    else, or a job that is not running."""
    from importlib import import_module

    from django.contrib.auth import get_user
    from django.db import close_old_connections
    from django.http import HttpRequest

    from backend.jobs.models import Job, JobStatus

    close_old_connections()
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    bare = HttpRequest()  # get_user reads nothing of a request but its session
    bare.session = store
    user = get_user(bare)
    if not user.is_authenticated:
        return None
    job = Job.objects.filter(job_id=job_id, owner=user, status=JobStatus.RUNNING).first()
    if job is None:
        return None
    return next((p["port"] for p in job.ports or [] if p.get("name") == name), None)


class EndpointProxy:
    def __init__(self, target) -> None:
        self.target = target  # JobTarget: whose listener a port is, as for ssh -L
        self.session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/endpoints/{job}/{name}/{rest:.*}", self.handle)
        app.router.add_route("*", "/endpoints/{job}/{name}", self.redirect)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.path + "/")

    async def _upstream(self, request: web.Request) -> str:
        job_id, name = request.match_info["job"], request.match_info["name"]
        session_key = request.cookies.get(settings.SESSION_COOKIE_NAME, "")
        port = await sync_to_async(_owner_port, thread_sensitive=False)(session_key, job_id, name)
        if port is None:
            raise web.HTTPNotFound(text="Not found.")
        try:
            listener = await asyncio.to_thread(self.target.listener, job_id, "localhost", port)
        except NotTheJobs as refusal:
            raise web.HTTPBadGateway(text=f"{refusal}.") from refusal
        return listener.host_port

    def _headers(self, request: web.Request, job_id: str) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        kept = [
            f"{name}={value}"
            for name, value in request.cookies.items()
            if name not in (*PORTAL_COOKIES, settings.SESSION_COOKIE_NAME)
        ]
        if kept:
            headers["Cookie"] = "; ".join(kept)
        headers["Authorization"] = f"token {endpoint_token(job_id)}"
        headers["X-Forwarded-Host"] = request.host
        headers["X-Forwarded-Proto"] = request.scheme
        return headers

    async def handle(self, request: web.Request) -> web.StreamResponse:
        upstream = await self._upstream(request)
        job_id = request.match_info["job"]
        if self.session is None:
            self.session = aiohttp.ClientSession(
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None)
            )
        session = self.session
        url = f"http://{upstream}{request.rel_url}"
        headers = self._headers(request, job_id)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._websocket(request, session, url, headers)
        async with session.request(
            request.method,
            url,
            headers=headers,
            data=request.content if request.body_exists else None,
            allow_redirects=False,
        ) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for name, value in answer.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    response.headers.add(name, value)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def _websocket(
        self, request: web.Request, session: aiohttp.ClientSession, url: str, headers: dict
    ) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin and urlsplit(origin).netloc != request.host:
            raise web.HTTPForbidden(text="A WebSocket from another site.")
        protocols = [
            p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
        ]
        protocols = [p for p in protocols if p]
        headers.pop("Sec-WebSocket-Protocol", None)
        try:
            upstream = await session.ws_connect(
                url, headers=headers, protocols=protocols, max_msg_size=0, autoping=True
            )
        except aiohttp.ClientError as error:
            raise web.HTTPBadGateway(text=f"The job's server refused: {error}") from error
        browser = web.WebSocketResponse(
            protocols=[upstream.protocol] if upstream.protocol else (), max_msg_size=0
        )
        await browser.prepare(request)

        async def relay(source, sink) -> None:
            async for message in source:
                if message.type == aiohttp.WSMsgType.TEXT:
                    await sink.send_str(message.data)
                elif message.type == aiohttp.WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                else:
                    break
            with contextlib.suppress(Exception):
                await sink.close()

        await asyncio.gather(relay(browser, upstream), relay(upstream, browser))
        return browser


async def start_endpoints(target, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(EndpointProxy(target).app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
