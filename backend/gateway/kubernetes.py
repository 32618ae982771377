"""Sessions into job pods on Kubernetes: the exec API (with a TTY, and its resize channel)
and the port-forward API, through the official client's ``kubernetes.stream`` (no sshd in
users' images).

The client is synchronous: each exec and each forwarded connection is served by a thread
that relays between the WebSocket and the event loop, with back-pressure (a chunk is
handed to the SSH channel before the next is read).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from typing import Any

import asyncssh
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import portforward, stream
from kubernetes.stream.ws_client import ERROR_CHANNEL, RESIZE_CHANNEL, STDIN_CHANNEL

from backend.gateway.access import Admission
from backend.gateway.ports import Listener, NotTheJobs
from backend.gateway.targets import LOOPBACK, Output, Unavailable, refused
from jobmanager.backends.k8s_manifests import pod_name

POLL_SECONDS = 0.1
READ_SIZE = 256 * 1024
SIGNAL_NAMES = {1: "HUP", 2: "INT", 9: "KILL", 15: "TERM"}


class KubernetesTarget:
    """Worker N of a job is the pod ``ty-<job>-<attempt>-<N>`` in the jobs' namespace."""

    unreachable = ""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace

    def _pod(self, admission: Admission) -> str:
        return pod_name(admission.login.job_id, admission.attempt, admission.login.rank)

    def available(self, admission: Admission) -> bool:
        """Whether the worker's pod runs; an API server that does not answer now (an
        error other than 404, no connection) ends no session: the job's status in the
        database says when the job ends."""
        try:
            pod = self.core.read_namespaced_pod(self._pod(admission), self.namespace)
        except ApiException as error:
            return error.status != 404
        except urllib3.exceptions.HTTPError:
            return True
        return (pod.status and pod.status.phase) == "Running"

    async def start(self, admission, argv, env, stdout, stderr, tty) -> PodProcess:
        # The exec API takes no environment: the session's own variables are set by env(1)
        # over the container's (which holds the job's).
        command = ["env", *(f"{name}={value}" for name, value in env.items()), *argv]
        loop = asyncio.get_running_loop()
        try:
            response = await asyncio.to_thread(
                stream,
                self.core.connect_get_namespaced_pod_exec,
                self._pod(admission),
                self.namespace,
                command=command,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=tty is not None,
                binary=True,
                _preload_content=False,
            )
        except ApiException as error:
            raise Unavailable(str(error)) from error
        process = PodProcess(response, loop, stdout, stderr)
        if tty is not None:
            process.resize(*tty)
        process.begin()
        return process

    def listener(self, job_id: str, host: str, port: int, rank: int = 0) -> Listener:
        # The endpoint proxy reaches local workers only, so far.
        raise NotTheJobs("the endpoint proxy does not reach jobs on Kubernetes yet")

    async def forward(self, admission, conn, host, port) -> asyncssh.SSHTCPSession:
        if host not in LOOPBACK:
            raise refused(f"only ports of job {admission.login.job_id}'s pod can be forwarded")
        try:
            forwarder = await asyncio.to_thread(
                portforward,
                self.core.connect_get_namespaced_pod_portforward,
                self._pod(admission),
                self.namespace,
                ports=str(port),
            )
        except ApiException as error:
            raise refused(f"cannot forward to port {port}: {error.reason}") from error
        return PodConnection(forwarder, port)


class PodProcess:
    """An exec in a pod, as a session's process."""

    def __init__(self, response, loop: asyncio.AbstractEventLoop, stdout: Output, stderr: Output):
        self.response = response
        self.loop = loop
        self.outputs = {1: stdout, 2: stderr}
        self.done = loop.create_future()
        self.lock = threading.Lock()

    def begin(self) -> None:
        threading.Thread(target=self._relay, daemon=True, name="kubernetes exec").start()

    def _relay(self) -> None:
        """Read the WebSocket until it closes, handing each chunk to the loop."""
        try:
            while self.response.is_open():
                # Sends (stdin, resizes) go out from other threads meanwhile: the
                # WebSocket's writes are locked apart from its reads.
                self.response.update(timeout=POLL_SECONDS)
                chunks = [
                    (channel, self.response.read_channel(channel))
                    for channel in (1, 2)
                    if self.response.peek_channel(channel)
                ]
                for channel, data in chunks:
                    asyncio.run_coroutine_threadsafe(
                        self.outputs[channel](data), self.loop
                    ).result()
            for channel in (1, 2):  # what came with the last frames
                data = self.response.read_channel(channel)
                if data:
                    asyncio.run_coroutine_threadsafe(
                        self.outputs[channel](data), self.loop
                    ).result()
            code = self._exit_code()
        except Exception:  # the stream broke: the session ends as if the pod went away
            code = 255
        self.loop.call_soon_threadsafe(_settle, self.done, code)

    def _exit_code(self) -> int:
        error = self.response.read_channel(ERROR_CHANNEL)
        status: dict[str, Any]
        try:
            status = json.loads(error) if error else {"status": "Success"}
        except ValueError:
            return 255
        if status.get("status") == "Success":
            return 0
        with contextlib.suppress(KeyError, IndexError, ValueError, TypeError):
            return int(status["details"]["causes"][0]["message"])
        return 255

    def _send(self, channel: int, data: bytes) -> None:
        with self.lock, contextlib.suppress(Exception):
            self.response.write_channel(channel, data)

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(self._send, STDIN_CHANNEL, data)

    def close_input(self) -> None:
        pass  # v4.channel.k8s.io cannot half-close stdin

    def resize(self, columns: int, rows: int) -> None:
        size = json.dumps({"Width": columns, "Height": rows}).encode()
        threading.Thread(target=self._send, args=(RESIZE_CHANNEL, size), daemon=True).start()

    def signal(self, signum: int) -> None:
        pass  # the exec API carries no signals (a TTY's ^C does reach the process)

    async def wait(self) -> int:
        return await self.done

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.response.close()


def _settle(future: asyncio.Future, code: int) -> None:
    if not future.done():
        future.set_result(code)


class PodConnection(asyncssh.SSHTCPSession):
    """One ``ssh -L`` connection relayed through a port-forward WebSocket."""

    def __init__(self, forwarder, port: int) -> None:
        self.forwarder = forwarder
        self.socket: socket.socket = forwarder.socket(port)
        self.chan: asyncssh.SSHTCPChannel | None = None

    def connection_made(self, chan: asyncssh.SSHTCPChannel) -> None:
        self.chan = chan
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._relay, args=(loop, chan), daemon=True).start()

    def _relay(self, loop: asyncio.AbstractEventLoop, chan: asyncssh.SSHTCPChannel) -> None:
        while True:
            try:
                data = self.socket.recv(READ_SIZE)
            except OSError:
                data = b""
            if not data:
                loop.call_soon_threadsafe(self._eof, chan)
                return
            loop.call_soon_threadsafe(chan.write, data)

    def _eof(self, chan: asyncssh.SSHTCPChannel) -> None:
        with contextlib.suppress(OSError, asyncssh.Error):
            chan.write_eof()
            chan.close()

    def data_received(self, data: bytes, datatype) -> None:
        with contextlib.suppress(OSError):
            self.socket.sendall(data)

    def eof_received(self) -> bool:
        # The port-forward protocol cannot half-close (the client's forwarder ends the
        # whole stream when its socket ends, the pod's answer with it), and asyncssh would
        # answer with an EOF of ours before the pod's answer: the channel stays open until
        # the pod's side ends (``ssh -W`` with its request on stdin, as kubectl does).
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        with contextlib.suppress(OSError):
            self.socket.close()
        self.forwarder.close()
