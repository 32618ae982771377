"""``manage.py run_trainyard``: the whole system on one host, as ``make run`` starts it.

Migrates, seeds the demo cluster (as root, with the demo users' Unix accounts), starts an
embedded Redis when REDIS_URL is unset, then the web server (gunicorn), a Celery worker and
Celery beat, and stops them all on Ctrl-C. The banner says how jobs are isolated: as their
owners' accounts (root), or all as this account (single-user mode).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from backend.accounts.models import UnixAccount
from backend.accounts.unix import accounts_required, tenancy
from backend.clusters.inventory import REGISTERED
from backend.core.embedded_redis import embedded_redis_url, start_embedded_redis
from backend.core.management.commands.seed_demo import DEMO_USERS
from backend.core.private_files import use_private_umask


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

    def handle(self, *args: object, **options: object) -> None:
        use_private_umask()  # the database it makes, the embedded Redis, the servers' files
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        child_env = dict(os.environ, PYTHONUNBUFFERED="1")
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
        python = sys.executable
        bind = f"{options['host']}:{options['port']}"
        commands = {
            "web": [python, "-m", "gunicorn", "backend.wsgi", "--bind", bind,
                    "--config", str(settings.BASE_DIR / "deploy" / "gunicorn.conf.py")],
            "worker": [python, "-m", "celery", "-A", "backend", "worker", "--loglevel", "INFO",
                       "--concurrency", "2"],
            "beat": [python, "-m", "celery", "-A", "backend", "beat", "--loglevel", "INFO",
                     "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
        }  # fmt: skip
        if local:
            commands["ends"] = [python, "manage.py", "watch_job_ends"]
        children = {
            name: subprocess.Popen(command, env=child_env, cwd=settings.BASE_DIR)
            for name, command in commands.items()
        }
        stopping = False
        banner_shown = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                exited = {n: c.returncode for n, c in children.items() if c.poll() is not None}
                if exited:
                    self.stderr.write(f"Stopping: {exited} exited.")
                    break
                if not banner_shown and _answers(f"http://{bind}/healthz"):
                    self._print_banner(bind, demo=not options["no_demo"], declared=declared)
                    banner_shown = True
                time.sleep(0.5)
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.terminate()
            for child in children.values():
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
            del redis

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
