"""The fake API server's streaming subresources: ``pods/exec`` and ``pods/portforward``,
over WebSocket with the channel protocol the ``kubernetes`` client speaks
(``v4.channel.k8s.io``: each binary frame starts with its channel byte).

- exec: channels 0 stdin, 1 stdout, 2 stderr, 3 the error channel (a ``Status`` when the
  command ends: ``Success``, or ``NonZeroExitCode`` with the code as its cause), 4 resize
  (``{"Width": w, "Height": h}``). The "container" is this host: the command runs as a
  real process with the pod's container environment, on a terminal when ``tty=true``.
- portforward: for each port of ``ports=``, a data channel (2i) and an error channel
  (2i+1), each opened by a frame carrying the port (two bytes, little-endian); the data
  is relayed to that port on 127.0.0.1 (the pod's network namespace is this host's).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import pty
import socket
import struct
import subprocess
import termios
import threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PROTOCOL = "v4.channel.k8s.io"
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA
STDIN, STDOUT, STDERR, ERROR, RESIZE = range(5)


class WebSocket:
    """The server side of one WebSocket on a request handler's streams."""

    def __init__(self, handler) -> None:
        self.rfile, self.wfile = handler.rfile, handler.wfile
        self.lock = threading.Lock()
        self.closed = False

    @staticmethod
    def accept(handler) -> WebSocket | None:
        """Answer the upgrade (101) choosing v4.channel.k8s.io; None when the request is
        not a WebSocket upgrade."""
        key = handler.headers.get("Sec-WebSocket-Key")
        if handler.headers.get("Upgrade", "").lower() != "websocket" or not key:
            return None
        offered = [p.strip() for p in handler.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        handler.send_response(101, "Switching Protocols")
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept)
        if PROTOCOL in offered:
            handler.send_header("Sec-WebSocket-Protocol", PROTOCOL)
        handler.end_headers()
        handler.close_connection = True
        return WebSocket(handler)

    def send(self, data: bytes, opcode: int = BINARY) -> None:
        header = bytes([0x80 | opcode])
        if len(data) < 126:
            header += bytes([len(data)])
        elif len(data) < 1 << 16:
            header += bytes([126]) + struct.pack(">H", len(data))
        else:
            header += bytes([127]) + struct.pack(">Q", len(data))
        with self.lock:
            if self.closed:
                return
            try:
                self.wfile.write(header + data)
                self.wfile.flush()
            except OSError:
                self.closed = True

    def send_channel(self, channel: int, data: bytes) -> None:
        self.send(bytes([channel]) + data)

    def receive(self) -> tuple[int, bytes] | None:
        """The next data frame (opcode, payload), answering pings; None once closed."""
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return None
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack(">H", self.rfile.read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if head[1] & 0x80 else b""
            payload = self.rfile.read(length)
            if mask:
                payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
            if opcode == CLOSE:
                self.close()
                return None
            if opcode == PING:
                self.send(payload, PONG)
                continue
            if opcode in (TEXT, BINARY):
                return opcode, payload

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send(struct.pack(">H", 1000), CLOSE)
        self.closed = True


def _status(code: int) -> bytes:
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    return json.dumps({
        "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
        "message": f"command terminated with non-zero exit code: {code}",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }).encode()  # fmt: skip


def serve_exec(socket_: WebSocket, command: list[str], env: dict[str, str], tty: bool) -> None:
    """Run ``command`` as the container would and relay it over the channels."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")} | env
    if tty:
        master, slave = pty.openpty()
        process = subprocess.Popen(
            command, stdin=slave, stdout=slave, stderr=slave, env=environment,
            start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        outputs = [(master, STDOUT)]
    else:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=environment, start_new_session=True,
        )  # fmt: skip
        master = None
        outputs = [(process.stdout.fileno(), STDOUT), (process.stderr.fileno(), STDERR)]

    def relay(descriptor: int, channel: int) -> None:
        while True:
            try:
                chunk = os.read(descriptor, 65536)
            except OSError:
                return
            if not chunk:
                return
            socket_.send_channel(channel, chunk)

    relays = [threading.Thread(target=relay, args=pair, daemon=True) for pair in outputs]
    for thread in relays:
        thread.start()

    def feed() -> None:
        while (frame := socket_.receive()) is not None:
            data = frame[1]
            if not data:
                continue
            channel, data = data[0], data[1:]
            try:
                if channel == STDIN:
                    os.write(master if tty else process.stdin.fileno(), data)
                elif channel == RESIZE and tty:
                    size = json.loads(data)
                    window = struct.pack("HHHH", size["Height"], size["Width"], 0, 0)
                    fcntl.ioctl(master, termios.TIOCSWINSZ, window)
            except (OSError, ValueError, KeyError):
                pass
        with contextlib.suppress(ProcessLookupError):  # the client went away
            os.killpg(process.pid, 9)

    threading.Thread(target=feed, daemon=True).start()
    code = process.wait()
    for thread in relays:
        thread.join(timeout=0.5 if tty else None)
    if master is not None:
        os.close(master)
    socket_.send_channel(ERROR, _status(128 - code if code < 0 else code))
    socket_.close()


def serve_portforward(socket_: WebSocket, ports: list[int]) -> None:
    """Relay each port's data channel to 127.0.0.1:<port>."""
    connections: dict[int, socket.socket] = {}
    for index, port in enumerate(ports):
        for channel in (2 * index, 2 * index + 1):
            socket_.send_channel(channel, struct.pack("<H", port))
        try:
            connections[2 * index] = socket.create_connection(("127.0.0.1", port))
        except OSError as error:
            socket_.send_channel(2 * index + 1, f"connection refused: {error}".encode())

    def relay(channel: int, connection: socket.socket) -> None:
        while True:
            try:
                chunk = connection.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                socket_.close()
                return
            socket_.send_channel(channel, chunk)

    for channel, connection in connections.items():
        threading.Thread(target=relay, args=(channel, connection), daemon=True).start()
    while (frame := socket_.receive()) is not None:
        data = frame[1]
        if data and data[0] in connections:
            with contextlib.suppress(OSError):
                connections[data[0]].sendall(data[1:])
    for connection in connections.values():
        connection.close()
