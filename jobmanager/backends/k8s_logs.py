"""Worker pods' logs, streamed from the API server into the log store the local backend
writes (``<log dir>/<job id>/worker-<rank>.log``), so that the log viewer, the download and
the retry classifier read a Kubernetes job as they read a local one, after its pods are
gone too.

While a pod runs, a thread follows its log (``read_namespaced_pod_log`` with ``follow``
and ``timestamps``) and appends each line as it comes. Once the pod has ended, what is
left is read in one request and the log is marked complete; the backend reports a worker
ended only then, so that its end is classified from its whole log. One follower per pod
across every process sharing the log store: each holds an exclusive lock on the pod's
position file, and another process takes over (from the recorded position, without
repeating a line) when one dies. Every attempt's log starts with a header line and ends
with how the container ended.
"""

from __future__ import annotations

import calendar
import contextlib
import fcntl
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

logger = logging.getLogger(__name__)

# Asked for again from a little before the last line written: the log API only takes a
# time relative to now, and the node's clock may differ from ours.
RESUME_MARGIN_SECONDS = 120
READ_TIMEOUT_SECONDS = 300  # a silent stream is reopened after this
FINAL_READ_ATTEMPTS = 3  # an ended pod whose log cannot be read is given up after these
_TIMESTAMP = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z ")
_JOB_ID = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class PodLog:
    """Which pod a worker log is read from, and where it is stored."""

    job_id: str
    attempt: int
    rank: int
    pod: str
    uid: str
    node: str

    def path(self, log_dir: Path) -> Path:
        return log_dir / self.job_id / f"worker-{self.rank}.log"


def timestamp_key(stamp: bytes) -> tuple[str, int] | None:
    """An RFC 3339 timestamp with up to nine fraction digits, comparable: (seconds, ns)."""
    found = _TIMESTAMP.match(stamp + b" ")
    if found is None:
        return None
    return found[1].decode(), int((found[2] or b"0").ljust(9, b"0"))


class _Position:
    """How far a worker's log has been written: the pod it follows, the timestamp of the
    last line written and how many lines had that timestamp, whether it is complete."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.state: dict[str, Any] = {}

    def load(self) -> dict[str, Any]:
        try:
            self.state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.state = {}
        return self.state

    def save(self) -> None:
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(self.state))
        partial.replace(self.path)


class _Writer:
    """Appends a pod's log lines to the store, skipping those already written."""

    def __init__(self, pod: PodLog, log_dir: Path) -> None:
        self.pod = pod
        self.log = pod.path(log_dir)
        self.position = _Position(self.log.with_name(f".worker-{pod.rank}.position.json"))
        self.lock_path = self.log.with_name(f".worker-{pod.rank}.lock")
        self._skip_same = 0

    @contextlib.contextmanager
    def locked(self) -> Iterator[bool]:
        """The pod's lock, if no one else holds it (then False, and nothing is written)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def start(self) -> dict[str, Any]:
        """The position for this pod; a new pod's log begins with its header line."""
        state = self.position.load()
        if state.get("uid") != self.pod.uid:
            started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
            self._append(
                f"=== attempt {self.pod.attempt} on {self.pod.node} at {started} "
                f"(pod {self.pod.pod}) ===\n".encode()
            )
            state.clear()
            state.update(uid=self.pod.uid, last=None, same=0, complete=False, failures=0)
            self.position.save()
        return state

    def since_seconds(self, now: float) -> int | None:
        last = self.position.state.get("last")
        if not last:
            return None
        seconds = calendar.timegm(time.strptime(last[0], "%Y-%m-%dT%H:%M:%S"))
        return max(1, math.ceil(now - seconds) + RESUME_MARGIN_SECONDS)

    def reopened(self) -> None:
        """A new read begins: the lines stamped like the last one written come again."""
        self._skip_same = self.position.state.get("same", 0)

    def write(self, lines: Iterable[bytes]) -> None:
        """Timestamped lines (``<RFC 3339> <text>``): those after the last one written."""
        state = self.position.state
        last = tuple(state["last"]) if state.get("last") else None
        skip_same = self._skip_same
        out = bytearray()
        for line in lines:
            found = _TIMESTAMP.match(line)
            key = timestamp_key(line[: found.end() - 1]) if found else None
            text = line[found.end() :] if found else line
            if key is not None and last is not None:
                if key < last:
                    continue
                if key == last and skip_same > 0:
                    skip_same -= 1
                    continue
            out += text
            if key is not None:
                state["same"] = state.get("same", 0) + 1 if key == last else 1
                last = key
                skip_same = 0
        self._skip_same = skip_same
        if out:
            self._append(bytes(out))
            state["last"] = list(last) if last else state.get("last")
            self.position.save()

    def finish(self, ending: str) -> None:
        self._append(f"=== {ending} ===\n".encode())
        self.position.state["complete"] = True
        self.position.save()

    def _append(self, data: bytes) -> None:
        with open(self.log, "ab") as log:
            log.write(data)


class PodLogCollector:
    """Follows the logs of the worker pods it is shown (see the module docstring)."""

    def __init__(
        self,
        core: client.CoreV1Api,
        namespace: str,
        container: str,
        log_dir: Path,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._core = core
        self._namespace = namespace
        self._container = container
        self._log_dir = log_dir
        self._clock = clock
        self._followers: dict[str, threading.Thread] = {}  # by pod uid
        # The responses being read, to cut them on stop.
        self._streams: set[urllib3.HTTPResponse] = set()
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def stop(self, join_seconds: float = 10) -> None:
        """End every follower (its stream is cut, not waited out)."""
        self._stopping.set()
        with self._lock:
            streams = list(self._streams)
        for response in streams:
            with contextlib.suppress(Exception):
                response.shutdown()
        for follower in list(self._followers.values()):
            follower.join(join_seconds)
        self._followers.clear()
        self._stopping.clear()

    def follow(self, pod: PodLog) -> None:
        """Stream a running pod's log in a thread, unless it is being streamed already
        (here, or by another process)."""
        if not _JOB_ID.fullmatch(pod.job_id):
            return
        with self._lock:
            current = self._followers.get(pod.uid)
            if current is not None and current.is_alive():
                return
            started = threading.Event()
            follower = threading.Thread(
                target=self._follow, args=(pod, started), name=f"log-{pod.pod}", daemon=True
            )
            self._followers[pod.uid] = follower
        follower.start()
        started.wait(5)  # until it holds the lock (or knows another does)

    def collect(self, pod: PodLog, ending: str, read: bool = True) -> bool:
        """Whether an ended pod's log is complete in the store; reads what is left of it
        (unless ``read`` is false: a pod that never started has none) when no one else
        is. ``ending`` says how the container ended, for the last line."""
        if not _JOB_ID.fullmatch(pod.job_id):
            return True
        with self._lock:
            follower = self._followers.get(pod.uid)
        if follower is not None:
            follower.join(5)  # its stream ends with the container
            if follower.is_alive():
                return False
        writer = _Writer(pod, self._log_dir)
        with writer.locked() as mine:
            if not mine:
                return False
            state = writer.start()
            if state.get("complete"):
                return True
            try:
                if read:
                    self._read(writer, follow=False)
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                state["failures"] = state.get("failures", 0) + 1
                writer.position.save()
                if state["failures"] < FINAL_READ_ATTEMPTS:
                    return False
                writer.finish(f"the rest of the log could not be read: {_describe(error)}")
                return True
            writer.finish(ending)
            return True

    def _follow(self, pod: PodLog, started: threading.Event) -> None:
        writer = _Writer(pod, self._log_dir)
        try:
            with writer.locked() as mine:
                started.set()
                if not mine or writer.start().get("complete"):
                    return
                self._read(writer, follow=True)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            # The stream broke (a restarting API server, the pod gone): the next report
            # follows it again or, once the pod ended, reads the rest.
            logger.info("following the log of %s stopped: %s", pod.pod, _describe(error))
        finally:
            started.set()

    def _read(self, writer: _Writer, follow: bool) -> None:
        options: dict[str, Any] = {"container": self._container, "timestamps": True}
        since = writer.since_seconds(self._clock())
        if since is not None:
            options["since_seconds"] = since
        response = _raw_response(
            self._core.read_namespaced_pod_log(
                writer.pod.pod,
                self._namespace,
                follow=follow,
                _preload_content=False,
                _request_timeout=(10, READ_TIMEOUT_SECONDS),
                **options,
            )
        )
        writer.reopened()
        pending = b""
        with self._lock:
            self._streams.add(response)
        if self._stopping.is_set():  # stop() came while this stream was being opened
            response.shutdown()
        try:
            for chunk in response.stream(64 * 1024, decode_content=True):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                writer.write(line + b"\n" for line in complete)
                if self._stopping.is_set():
                    return
        finally:
            with self._lock:
                self._streams.discard(response)
            response.release_conn()
        if pending and not follow:  # a stream cut mid-line sends the line again
            writer.write([pending + b"\n"])


def _describe(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"


def _raw_response(response: object) -> urllib3.HTTPResponse:
    """With ``_preload_content=False`` the client returns urllib3's response, not the
    ``str`` its methods are annotated with."""
    if not isinstance(response, urllib3.HTTPResponse):
        raise TypeError(f"expected urllib3's raw response, got a {type(response).__name__}")
    return response
