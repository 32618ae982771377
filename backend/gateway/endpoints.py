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
target's ``listener``: the gateway's forwards decide the same way), and keeps a pool of
connections per job, user and listener: a connection opened for one never carries a
request of another, nor one made once a different socket listens there. A sandboxed
job's listener is in the job's network namespace: its pool's connections are made in it
(``JobConnector``); a Slurm job's is on its node, reached through a relay in the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from aiohttp.client_proto import ResponseHandler
from asgiref.sync import sync_to_async
from django.conf import settings

from backend.gateway.ports import Listener, NotTheJobs, connect
from backend.jobs.endpoint_tokens import endpoint_token

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length", "cookie",
    "origin", "authorization", "sec-websocket-key", "sec-websocket-version",
    "sec-websocket-extensions", "sec-websocket-accept",
}  # fmt: skip
PORTAL_COOKIES = ("sessionid", "csrftoken")
IDLE_POOL_SECONDS = 60  # a pool no request used for this long is closed


def _owner_port(session_key: str, job_id: str, name: str) -> tuple[int, int] | None:
    """The signed-in user's id and the port their running job exposes as ``name``; None
    for anyone else, or a job that is not running."""
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
    port = next((p["port"] for p in job.ports or [] if p.get("name") == name), None)
    return None if port is None else (user.pk, port)


@dataclass(frozen=True)
class Upstream:
    """Where a request goes: the job's own listener, on behalf of one user."""

    job_id: str
    user_id: int
    listener: Listener


class JobConnector(aiohttp.BaseConnector):
    """Connections to a listener in a job's network namespace, made inside it, or on
    another machine, made through its route (whatever the URL's host and port, which
    name the listener)."""

    def __init__(self, listener: Listener) -> None:
        super().__init__()
        self.listener = listener

    async def _create_connection(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> ResponseHandler:
        try:
            sock = await asyncio.to_thread(connect, self.listener)
        except OSError as error:
            raise aiohttp.ClientConnectorError(req.connection_key, error) from error
        _, protocol = await self._loop.create_connection(self._factory, sock=sock)
        return protocol


@dataclass
class Pool:
    session: aiohttp.ClientSession
    in_use: int = 0
    last_used: float = 0.0


class Pools:
    """One connection pool (an aiohttp session) per upstream: job, user and listener."""

    def __init__(self) -> None:
        self.pools: dict[Upstream, Pool] = {}

    @contextlib.asynccontextmanager
    async def session(self, upstream: Upstream) -> AsyncIterator[aiohttp.ClientSession]:
        """The upstream's pool, for the time of one request."""
        await self._close_idle()
        pool = self.pools.get(upstream)
        if pool is None:
            listener = upstream.listener
            session = aiohttp.ClientSession(
                connector=JobConnector(listener) if listener.elsewhere else None,
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None),
            )
            pool = self.pools[upstream] = Pool(session)
        pool.in_use += 1
        try:
            yield pool.session
        finally:
            pool.in_use -= 1
            pool.last_used = time.monotonic()

    async def _close_idle(self) -> None:
        now = time.monotonic()
        for upstream, pool in list(self.pools.items()):
            if not pool.in_use and now - pool.last_used > IDLE_POOL_SECONDS:
                del self.pools[upstream]
                await pool.session.close()

    async def close(self) -> None:
        pools, self.pools = self.pools, {}
        for pool in pools.values():
            await pool.session.close()


class EndpointProxy:
    def __init__(self, target) -> None:
        self.target = target  # JobTarget: whose listener a port is, as for ssh -L
        self.pools = Pools()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/endpoints/{job}/{name}/{rest:.*}", self.handle)
        app.router.add_route("*", "/endpoints/{job}/{name}", self.redirect)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app: web.Application) -> None:
        await self.pools.close()

    async def redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.path + "/")

    async def _upstream(self, request: web.Request) -> Upstream:
        job_id, name = request.match_info["job"], request.match_info["name"]
        session_key = request.cookies.get(settings.SESSION_COOKIE_NAME, "")
        owned = await sync_to_async(_owner_port, thread_sensitive=False)(session_key, job_id, name)
        if owned is None:
            raise web.HTTPNotFound(text="Not found.")
        user_id, port = owned
        try:
            listener = await asyncio.to_thread(self.target.listener, job_id, "localhost", port)
        except NotTheJobs as refusal:
            raise web.HTTPBadGateway(text=f"{refusal}.") from refusal
        return Upstream(job_id, user_id, listener)

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
        async with self.pools.session(upstream) as session:
            return await self._relay(request, session, upstream)

    async def _relay(
        self, request: web.Request, session: aiohttp.ClientSession, upstream: Upstream
    ) -> web.StreamResponse:
        url = f"http://{upstream.listener.host_port}{request.rel_url}"
        headers = self._headers(request, upstream.job_id)
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
