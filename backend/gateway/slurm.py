"""Sessions into workers of Slurm jobs, on whichever node they run.

Every session, command and SFTP server is a step of the worker's job on its node
(``jobmanager.backends.slurm_steps``: ``srun --jobid --overlap``, as the job's owner, with
the worker's environment and working directory), on a terminal (``srun --pty``, whose
window size follows the client's) or on pipes; its exit status is the step's. Slurm ends
the step with the job.

A port forward (``ssh -L``/``-W``) and the endpoint proxy connect through a relay run the
same way (``slurm_relay``): it connects from inside the job on the node, where the
node's loopback is the job's (Jupyter's default, and most ``ssh -L`` targets, listen on
127.0.0.1 only: from the gateway's host, at the node's address, they are not there), and
only to a port that a process of that job listens on, which it checks there with
``ports.job_listener``. Nothing on the gateway's host connects anywhere for the job: root
hands the relay's stdin and stdout (one end of a socket pair) to the client, and the
relay itself runs as the owner, in the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

from backend.gateway.access import Admission
from backend.gateway.ports import CONNECT_TIMEOUT_SECONDS, Listener, NotTheJobs
from backend.gateway.processes import JobProcess
from backend.gateway.targets import LOOPBACK, Unavailable, forwarded, refused
from jobmanager.backends.slurm import SlurmBackend
from jobmanager.backends.slurm_commands import SlurmError, SlurmJob
from jobmanager.backends.slurm_steps import SYSTEM_PATH, WorkerStep

RELAY = __file__.rsplit("/", 1)[0] + "/slurm_relay.py"
# The relay's Python on the node: the system's (the gateway's may be a virtualenv the
# job's owner cannot read).
NODE_PYTHON = shutil.which("python3", path=SYSTEM_PATH) or "python3"
ANSWER_LIMIT = 4096
JOBS_FRESH_SECONDS = 1.0


class SlurmTarget:
    """Workers of the Slurm backend: steps of their jobs on their nodes."""

    unreachable = ""

    def __init__(self, backend: SlurmBackend) -> None:
        self.backend = backend
        self._listed: tuple[float, list[SlurmJob]] = (-JOBS_FRESH_SECONDS, [])
        self._listing = threading.Lock()

    def _step(self, job_id: str, rank: int) -> WorkerStep | None:
        listed, fresh = self._slurm_jobs()
        step = self.backend.worker_step(job_id, rank, listed)
        if step is None and not fresh:  # the list may be older than the job's start
            step = self.backend.worker_step(job_id, rank, self._slurm_jobs(refresh=True)[0])
        return step

    def _slurm_jobs(self, refresh: bool = False) -> tuple[list[SlurmJob], bool]:
        """squeue's jobs, asked at most once in JOBS_FRESH_SECONDS for every connection's
        checks together (each connection checks its job every second, by default), and
        whether they were asked just now."""
        with self._listing:
            listed_at, jobs = self._listed
            if not refresh and time.monotonic() - listed_at < JOBS_FRESH_SECONDS:
                return jobs, False
            # When the controller does not answer, what it said last holds: a moment of
            # slurmctld's is no reason to end every session (Slurm ends a job's steps).
            with contextlib.suppress(SlurmError):
                jobs = self.backend.slurm.jobs()
            self._listed = (time.monotonic(), jobs)
            return jobs, True

    def available(self, admission: Admission) -> bool:
        return self._step(admission.login.job_id, admission.login.rank) is not None

    async def start(self, admission, argv, env, stdout, stderr, tty) -> JobProcess:
        login = admission.login
        step = await asyncio.to_thread(self._step, login.job_id, login.rank)
        if step is None:
            raise Unavailable(login.job_id)
        command = step.argv(argv, pty=tty is not None)
        # srun --pty reads the client's terminal from its own: it must be its session's.
        command = ["setsid", "--ctty", *command] if tty is not None else command
        process = JobProcess()
        await process.spawn(
            command, step.environment(self.backend.slurm.conf, env), stdout, stderr, tty
        )
        return process

    def listener(self, job_id: str, host: str, port: int, rank: int = 0) -> Listener:
        step = self._step(job_id, rank)
        if step is None:
            raise NotTheJobs(f"worker {rank} of job {job_id} is not running")
        if host not in LOOPBACK:
            raise NotTheJobs(f"only ports of job {job_id} on localhost can be forwarded")
        route = SlurmRoute(step, self.backend.slurm.conf)
        answer, _ = route.run(host, port, check=True)
        return route.listener(answer, port)

    async def forward(self, admission, conn, host, port):
        login = admission.login
        step = await asyncio.to_thread(self._step, login.job_id, login.rank)
        if step is None:
            raise refused(f"worker {login.rank} of job {login.job_id} is not running")
        route = SlurmRoute(step, self.backend.slurm.conf)
        try:
            _, sock = await asyncio.to_thread(route.run, host, port)
        except NotTheJobs as refusal:
            raise refused(str(refusal)) from refusal
        return await forwarded(sock=sock)


@dataclass(frozen=True)
class SlurmRoute:
    """A worker's node, reached through a relay in its job (``slurm_relay``)."""

    step: WorkerStep
    conf: str

    def open(self, listener: Listener, timeout: float) -> socket.socket:
        """A connection to the listener, while those very sockets listen there."""
        try:
            _, sock = self.run(listener.address, listener.port, listener.inodes, timeout)
        except NotTheJobs as refusal:
            raise ConnectionRefusedError(str(refusal)) from refusal
        return sock

    def listener(self, answer: str, port: int) -> Listener:
        """The listener the relay's ``ok <address> <inodes>`` names."""
        _, address, inodes = answer.split(" ", 2)
        return Listener(address, port, frozenset(int(i) for i in inodes.split(",")), route=self)

    def run(
        self,
        host: str,
        port: int,
        inodes: frozenset[int] | None = None,
        timeout: float = CONNECT_TIMEOUT_SECONDS,
        check: bool = False,
    ) -> tuple[str, socket.socket]:
        """Start the relay; its ``ok`` line and our end of the connection it relays (for
        ``check``, closed); raises NotTheJobs with its refusal, saying why."""
        ours, theirs = socket.socketpair()
        arguments = [self.step.job_id, host, str(port)]
        arguments += [",".join(str(i) for i in sorted(inodes))] if inodes else []
        arguments += ["--check"] if check else []
        command = self.step.argv([NODE_PYTHON, "-I", "-S", RELAY, *arguments])
        try:
            process = subprocess.Popen(
                command, stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=subprocess.DEVNULL,
                env=self.step.environment(self.conf, {}), close_fds=True,
                start_new_session=True,
            )  # fmt: skip
        finally:
            theirs.close()
        threading.Thread(target=process.wait, daemon=True, name="slurm relay").start()
        try:
            answer = _first_line(ours, timeout + 20)  # srun's own start included
        except OSError:
            answer = ""
        if not answer.startswith("ok "):
            ours.close()
            if not answer:
                process.kill()
            reason = answer.removeprefix("refused ").strip()
            raise NotTheJobs(reason or f"the node of job {self.step.job_id} did not answer")
        if check:
            ours.close()
        return answer, ours


def _first_line(sock: socket.socket, timeout: float) -> str:
    """The relay's answer, read byte by byte (what follows it is the connection's)."""
    sock.settimeout(timeout)
    line = bytearray()
    while len(line) < ANSWER_LIMIT:
        byte = sock.recv(1)
        if not byte or byte == b"\n":
            break
        line += byte
    sock.settimeout(None)
    return line.decode(errors="replace")
