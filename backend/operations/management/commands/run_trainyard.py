"""``manage.py run_trainyard``: the whole system on one host, as ``make run`` starts it.

Migrates, seeds the demo cluster (as root, with the demo users' Unix accounts), starts an
embedded Redis when REDIS_URL is unset, then the web server (nginx in front of gunicorn,
backend/core/front.py), a Celery worker, Celery beat, the SSH gateway (on
TRAINYARD_SSH_PORT) and, for the local backend, ``watch_job_ends`` and the resident spawner
of workers' inits (``local_spawner``), and stops them all on Ctrl-C. The banner says how
jobs are isolated: as their owners' accounts (root), or all as this account (single-user
mode), and the gateway's host key fingerprint.

It supervises its children as an init system would: one that dies (a crash, the OOM
killer, kill -9) is logged and started again: at once when it had run 10 s or died for the
first time, else after a backoff that doubles with each quick death in a row (1 s, 2 s,
... 30 s) but never holds it down longer than it ran before dying. What it left in its
process group (gunicorn's or Celery's pool workers) is killed first. A dying child never
stops the system.

The web server's unix socket is made and held by this supervisor, and handed to each
gunicorn it starts (``--bind fd://N``), as systemd's socket activation does: while a killed
gunicorn is started again, the front's connections wait in the socket's queue and are
answered by the new one, rather than refused (a 503 from the front).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from backend.accounts.models import UnixAccount
from backend.accounts.unix import accounts_required, tenancy
from backend.clusters.inventory import REGISTERED
from backend.core.embedded_redis import (
    embedded_redis_url,
    start_embedded_redis,
    stop_embedded_redis,
)
from backend.core.private_files import use_private_umask
from backend.jobmanager.management.commands.stop_jobs import jobs_left_running, left_running_message
from backend.operations.management.commands.seed_demo import DEMO_USERS

# Restart delays after 1, 2, 3... quick deaths in a row, each cut to the time the child ran.
RESTART_BACKOFF_SECONDS = (0, 1, 2, 4, 8, 16, 30)
# A child that ran this long had started: its death is not a crash loop, it restarts at once.
STABLE_SECONDS = 10.0
SUPERVISE_EVERY_SECONDS = 0.1  # how soon a death is seen


class HeldUnixSocket:
    """A listening unix socket that outlives the servers it is handed to: connections made
    while no server runs wait in its queue (``backlog``) for the next one."""

    def __init__(self, path: Path, backlog: int = 2048) -> None:
        self.path, self.backlog = path, backlog
        self.listener = self._listen()
        self.fd = self.listener.fileno()  # kept the same when the socket is made again

    def _listen(self) -> socket.socket:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # an earlier run's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(self.backlog)
        return listener

    def ensure(self) -> int:
        """The socket's fd, the socket made again (at the same fd) if its path is gone:
        gunicorn removes the path of the socket it listened on when it stops by itself."""
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(self.path.stat().st_mode):
                return self.fd
        fresh = self._listen()
        os.dup2(fresh.fileno(), self.fd, inheritable=False)  # handed only to the web server
        fresh.close()
        return self.fd

    def close(self) -> None:
        self.listener.close()
        self.path.unlink(missing_ok=True)


class Child:
    """One supervised process, in a process group of its own, given ``held``'s socket."""

    def __init__(
        self,
        name: str,
        command: list[str],
        env: dict[str, str],
        cwd,
        held: HeldUnixSocket | None = None,
    ) -> None:
        self.name, self.command, self.env, self.cwd, self.held = name, command, env, cwd, held
        self.process: subprocess.Popen | None = None
        self.started_at = 0.0
        self.restart_at = 0.0
        self.failures = 0

    def start(self) -> subprocess.Popen:
        """Start the process; returns it (also kept as ``process``)."""
        pass_fds = (self.held.ensure(),) if self.held is not None else ()
        self.process = process = subprocess.Popen(
            self.command, env=self.env, cwd=self.cwd, start_new_session=True, pass_fds=pass_fds
        )
        self.started_at = time.monotonic()
        return process

    def exited(self) -> int | None:
        """The exit status when the process has just been found dead (then forgotten)."""
        if self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # its pool workers, left behind
        self.process = None
        now = time.monotonic()
        ran = now - self.started_at
        if ran >= STABLE_SECONDS:
            self.failures = 0
        backoff = RESTART_BACKOFF_SECONDS[min(self.failures, len(RESTART_BACKOFF_SECONDS) - 1)]
        self.failures += 1
        # Down no longer than it was up: a server killed while booting comes back as soon.
        self.restart_at = now + min(backoff, ran)
        return code

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def wait(self) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


class Command(BaseCommand):
    help = "Run web, Celery worker and beat together, with embedded defaults."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("TRAINYARD_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("TRAINYARD_PORT", 8000)))
        parser.add_argument("--no-demo", action="store_true", help="Do not seed demo data.")

    def handle(self, *args: object, **options: Any) -> None:
        use_private_umask()  # the database it makes, the embedded Redis, the servers' files
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        from backend.accounts.host_key import load_host_key

        load_host_key(settings.TRAINYARD_SSH_HOST_KEY)  # its fingerprint is in the banner
        child_env = dict(os.environ, PYTHONUNBUFFERED="1")
        # prometheus-client's multiprocess files are per process id: those of an earlier
        # run would add old workers' counters to this run's.
        for stale in settings.TRAINYARD_METRICS_DIR.glob("*.db"):
            stale.unlink(missing_ok=True)
        redis = None
        if not settings.REDIS_URL:
            # Before the demo data: what it asks of the job manager must find Redis up.
            redis = start_embedded_redis()
            child_env["REDIS_URL"] = embedded_redis_url(redis)
            self.stdout.write(f"Embedded Redis on {redis.socket_file}")
        if not options["no_demo"]:
            call_command("seed_demo")
        declared = settings.TRAINYARD_BACKEND == "local" and not settings.TRAINYARD_LOCAL_NODES
        if declared:
            # Run jobs as processes on this host on the registered nodes, their GPUs
            # declared: the inventory follows the nodes registered while it runs.
            child_env["TRAINYARD_LOCAL_NODES"] = REGISTERED
        local = settings.TRAINYARD_BACKEND == "local"
        if local and not settings.TRAINYARD_LOCAL_NOTIFY_SOCKET:
            # Workers report their ends here, and watch_job_ends runs the job manager.
            child_env["TRAINYARD_LOCAL_NOTIFY_SOCKET"] = str(
                settings.TRAINYARD_LOCAL_STATE_DIR / "ends.sock"
            )
        if local and not settings.TRAINYARD_LOCAL_SPAWNER_SOCKET:
            # Workers' inits are forked by the resident spawner, not started afresh.
            child_env["TRAINYARD_LOCAL_SPAWNER_SOCKET"] = str(
                settings.TRAINYARD_LOCAL_STATE_DIR / "spawner.sock"
            )
        python = sys.executable
        bind = f"{options['host']}:{options['port']}"
        # The health server (backend/core/health.py) on the next port, unless told where.
        child_env.setdefault("TRAINYARD_HEALTH_BIND", f"{options['host']}:{options['port'] + 1}")
        if settings.TRAINYARD_ENDPOINTS_PORT and not settings.TRAINYARD_ENDPOINTS_URL:
            # No front proxy here: the browser reaches the endpoint proxy on its own port.
            host = "localhost" if options["host"] in ("127.0.0.1", "0.0.0.0") else options["host"]
            child_env["TRAINYARD_ENDPOINTS_URL"] = (
                f"http://{host}:{settings.TRAINYARD_ENDPOINTS_PORT}"
            )
        # gunicorn on a socket that only the front (and the portal's account) can reach,
        # held here across gunicorn's restarts.
        web_socket = HeldUnixSocket(settings.VAR_DIR / "run" / "gunicorn.sock")
        commands = {
            "front": [python, "-m", "backend.core.front", bind,
                      "--upstream", f"unix:{web_socket.path}"],
            "web": [python, "-m", "gunicorn", "backend.wsgi", "--bind", f"fd://{web_socket.fd}",
                    "--config", str(settings.BASE_DIR / "deploy" / "gunicorn.conf.py")],
            # Without mingle: it waits a second at each start for other workers' revoked
            # tasks, and Trainyard revokes none.
            "worker": [python, "-m", "celery", "-A", "backend", "worker", "--loglevel", "INFO",
                       "--concurrency", "2", "--without-mingle"],
            "beat": [python, "-m", "celery", "-A", "backend", "beat", "--loglevel", "INFO",
                     "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
            "gateway": [python, "-m", "backend.gateway"],
        }  # fmt: skip
        if local:
            commands["ends"] = [python, "manage.py", "watch_job_ends"]
        children = [
            Child(name, command, child_env, settings.BASE_DIR,
                  held=web_socket if name == "web" else None)
            for name, command in commands.items()
        ]  # fmt: skip
        if local and "TRAINYARD_LOCAL_SPAWNER_SOCKET" in child_env:
            children.append(self._spawner(child_env["TRAINYARD_LOCAL_SPAWNER_SOCKET"]))
        for child in children:
            child.start()
        stopping = False
        banner_shown = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                for child in children:
                    code = child.exited()
                    if code is not None:
                        delay = max(0.0, child.restart_at - time.monotonic())
                        self.stderr.write(
                            f"{child.name} exited with {code}; restarting it in {delay:.1f} s "
                            f"(restart {child.failures})."
                        )
                    if child.process is None and time.monotonic() >= child.restart_at:
                        process = child.start()
                        self.stderr.write(f"{child.name} restarted (pid {process.pid}).")
                if not banner_shown and _answers(f"http://{bind}/healthz"):
                    self._print_banner(bind, demo=not options["no_demo"], declared=declared)
                    banner_shown = True
                time.sleep(SUPERVISE_EVERY_SECONDS)
        finally:
            for child in children:
                child.stop()
            for child in children:
                child.wait()
            web_socket.close()
            if left := left_running_message(jobs_left_running()):
                self.stdout.write(left)
            if redis is not None:
                stop_embedded_redis(redis)

    def _spawner(self, socket_path: str) -> Child:
        """The resident spawner of inits, isolated as the inits are (``python -I -S``, the
        init's bare environment: nothing of the portal's settings or secrets)."""
        from jobmanager.backends.local import INIT_ENV, SPAWNER_SCRIPT

        settings.TRAINYARD_LOCAL_STATE_DIR.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-I", "-S", str(SPAWNER_SCRIPT), "--socket", socket_path]
        return Child("spawner", command, dict(INIT_ENV), settings.BASE_DIR)

    def _print_banner(self, bind: str, demo: bool, declared: bool = False) -> None:
        host, port = bind.rsplit(":", 1)
        url = f"http://{'localhost' if host in ('127.0.0.1', '0.0.0.0') else host}:{port}/"
        lines = ["", f"Trainyard is running at {url}", f"  API docs:  {url}api/docs/"]
        if demo:
            lines.append("  Demo logins (user / password):")
            for username, password, is_admin, roles in DEMO_USERS:
                what = (
                    "cluster admin"
                    if is_admin
                    else ", ".join(f"{role} of {vc}" for vc, role in roles.items())
                )
                lines.append(f"    {username:<6} / {password:<11}  {what}")
        if declared:
            from backend.clusters.models import Node

            names = list(Node.objects.order_by("name").values_list("name", flat=True))
            lines.append(
                f"  Jobs run as processes on this host, on the {len(names)} registered nodes "
                f"({', '.join(names[:1])} ...; nodes registered later too): their GPUs are "
                "declared, not real."
            )
        from backend.accounts.host_key import host_key_fingerprint

        fingerprint = host_key_fingerprint() or "not made yet"
        lines.append(
            f"  SSH into running jobs: ssh -p {settings.TRAINYARD_SSH_PORT} <user>+<job id>@"
            f"{settings.TRAINYARD_SSH_GATEWAY} (host key {fingerprint})"
        )
        lines.append(f"  {tenancy()['message']}")
        if demo and accounts_required():
            accounts = UnixAccount.objects.filter(
                user__username__in=[username for username, *_ in DEMO_USERS]
            ).select_related("user")
            lines += [
                f"    {account.user.username:<6} -> {account.unix_name} (uid {account.uid})"
                for account in accounts.order_by("user__username")
            ]
        lines.append("Press Ctrl-C to stop.")
        self.stdout.write("\n".join(lines))
        self.stdout.flush()
