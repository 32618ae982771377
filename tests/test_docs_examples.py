"""Every shell example of the README, the user guide and the operations guide runs as
written against a live system and does what its text says, as root and again as a normal
user.

The examples are read from the Markdown at test time (tests/docs_examples.py; the
convention is in docs/user-guide.md, "Examples in these documents"). The live system is
``make run``'s, started by root (multi-tenant): the demo cluster and users (seed_demo),
gunicorn, a Celery worker and beat on the local backend over the registered nodes, jobs as
their owners' accounts in the training environment. One live system serves every block.
Each document's blocks run in bash, in order as in one terminal (what a block sets, the
next one sees), each with ``set -e`` and a ``curl`` that fails on a refused request; the
address the documents give for the portal is the live one's, and the placeholders (a
token, job ids) are real ones. Then a normal Unix account, made for the test and removed
after it, runs the README's and the user guide's blocks again (all but ``as=admin``) as
its own Trainyard user, with the command-line client on its PATH and signed in with
``trainyard login``.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from django.contrib.auth import get_user_model
from django.core.management import call_command

from backend.accounts.actions import create_api_token
from backend.operations.management.commands.seed_demo import DEMO_USERS
from backend.vcs.actions import set_membership
from backend.vcs.models import VirtualCluster
from tests.docs_examples import DOCUMENTS, ROOT, Example, shell_examples
from tests.e2e.dashboard import LiveServers, live_servers, set_password
from tests.jobmanager.test_local_images import build_image
from tests.polling import wait_until
from tests.unix_accounts import (
    JOB_PYTHON,
    JOB_PYTHONPATH,
    TEST_ACCOUNT_ENV,
    TEST_NAME_PREFIX,
    require_root,
)

JOB_SECONDS = 300  # a training job's start, 300 steps and end, on loaded cores
# Each block: errors stop it, a refused request is an error, what it sets is kept.
PRELUDE = """set -euo pipefail
curl() { command curl --fail-with-body "$@"; }
"""
ASSIGNMENT = re.compile(r"(?:^|;)\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", re.M)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENDED = ("finished", "failed", "killed", "timeout")
# The user guide's image, built here (busybox, umoci) into the live system's image store
# under that reference: the site's store holds it, no registry is asked.
GUIDE_IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
ELASTIC_STEP = re.compile(r"step (\d+) world (\d+) loss (\d+\.\d+)")
PORTAL = ("http://localhost:8000", "https://trainyard.example.com")


@dataclass
class Terminal:
    """A shell of one user's (root, or a normal account), in which blocks run in order."""

    user: str  # the Trainyard user it acts as
    password: str
    env: dict[str, str]
    state: Path  # what the blocks set, sourced by the next
    cwd: Path
    account: pwd.struct_passwd | None = None  # None: root
    substitutions: dict[str, str] = field(default_factory=dict)

    def run(
        self, example: Example | str, stdin: str = "", also: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run the block (or one command of it), its placeholders (and ``also``'s) replaced."""
        body = example.body if isinstance(example, Example) else example
        for placeholder, value in (self.substitutions | (also or {})).items():
            body = body.replace(placeholder, value)
        names = sorted(set(ASSIGNMENT.findall(body)))
        keep = f"declare -p {' '.join(names)} >> {self.state}\n" if names else ""
        script = f"{PRELUDE}. {self.state}\n{body}\n{keep}"
        return subprocess.run(
            ["bash", "-c", script], cwd=self.cwd, env=self.env, input=stdin,
            capture_output=True, text=True, timeout=JOB_SECONDS, start_new_session=True,
            **self._identity(),
        )  # fmt: skip

    def _identity(self) -> dict:
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    def variable(self, name: str) -> str:
        done = subprocess.run(
            ["bash", "-c", f'. {self.state}; printf %s "${name}"'], capture_output=True, text=True
        )
        return done.stdout

    def command(self, argv: list[str]) -> subprocess.CompletedProcess:
        """A program run as this terminal's user, outside the blocks."""
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, check=True, **self._identity()
        )


@dataclass
class Demo:
    """The live demo system, its users' tokens, and the API as they see it."""

    servers: LiveServers
    directory: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, username: str) -> str:
        if username not in self.tokens:
            user = get_user_model().objects.get(username=username)
            self.tokens[username] = create_api_token(user, "docs examples")[1]
        return self.tokens[username]

    def call(self, method: str, username: str, path: str, body: object = None) -> requests.Response:
        return requests.request(
            method, f"{self.servers.base_url}/api/v1/{path}", json=body, timeout=30,
            headers={"Authorization": f"Token {self.token(username)}"},
        )  # fmt: skip

    def api(self, username: str, path: str) -> requests.Response:
        return self.call("GET", username, path)

    def submit(self, username: str, spec: dict) -> str:
        submitted = self.call("POST", username, "jobs/", spec)
        assert submitted.status_code == 201, submitted.text
        return submitted.json()["id"]

    def job_reaches(self, username: str, job_id: str, statuses: tuple[str, ...]) -> dict:
        def reached() -> dict | None:
            job = self.api(username, f"jobs/{job_id}/").json()
            return job if job["status"] in statuses else None

        return wait_until(reached, JOB_SECONDS, f"job {job_id} to be {'/'.join(statuses)}")

    def job_ends(self, username: str, job_id: str) -> dict:
        return self.job_reaches(username, job_id, ENDED)

    def finishes(self, username: str, job_id: str) -> dict:
        """The job, once ended; it must have finished (else its message and log say why)."""
        job = self.job_ends(username, job_id)
        if job["status"] != "finished":  # whole, not cut short as an assertion's repr is
            logs = "\n".join(
                f"--- worker {worker}:\n{self.log(username, job_id, worker)}"
                for worker in range(job["workers"])
            )
            pytest.fail(f"{job_id} {job['status']}: {job['status_message']}\n{logs}")
        return job

    def log(self, username: str, job_id: str, worker: int = 0) -> str:
        return self.api(username, f"jobs/{job_id}/log/tail/?worker={worker}").json()["text"]

    def terminal(self, name: str, user: str, password: str, cwd: Path, account=None) -> Terminal:
        """A fresh terminal with its own HOME and state, the CLI on its PATH."""
        home = Path(account.pw_dir) if account else self.directory / f"home-{name}"
        home.mkdir(exist_ok=True)
        bin_dir = home / ".local" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / "trainyard").write_text(cli_launcher())
        (bin_dir / "trainyard").chmod(0o755)
        state = home / "terminal.sh"
        state.write_text("")
        env = os.environ | TEST_ACCOUNT_ENV | self.servers.env
        if account is not None:  # a login shell's environment, nothing of root's
            env = {"USER": account.pw_name, "LOGNAME": account.pw_name, "SHELL": "/bin/bash",
                   "LANG": "C.UTF-8"}  # fmt: skip
            for path in [home, *home.rglob("*")]:
                os.chown(path, account.pw_uid, account.pw_gid)
        env |= {"HOME": str(home), "PATH": f"{bin_dir}:{SYSTEM_PATH}"}
        return Terminal(user, password, env, state, cwd, account)


def cli_launcher() -> str:
    """``trainyard`` as the package installs it, for any account: the system's Python of
    the suite's version with the suite's packages (the suite's own interpreter may lie
    under root's home, as on CI)."""
    return (
        f"#!/bin/sh\nPYTHONPATH={JOB_PYTHONPATH} exec {JOB_PYTHON} -c "
        "'import sys; from trainyard_cli.main import main; sys.exit(main())' \"$@\"\n"
    )


@contextmanager
def normal_account(directory: Path) -> Iterator[pwd.struct_passwd]:
    """A Unix account of its own (``docs-examples-<random>``), removed at the end with the
    job account the portal provisions for its Trainyard user of the same name."""
    require_root()
    name = f"docs-examples-{secrets.token_hex(3)}"
    home = directory / name
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
         "--user-group", "--no-log-init", name],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield pwd.getpwnam(name)
    finally:
        for account in (name, TEST_NAME_PREFIX + name):
            subprocess.run(["userdel", "--force", "--remove", account], capture_output=True)
            subprocess.run(["groupdel", account], capture_output=True)


@pytest.fixture
def demo(transactional_db, host_tmp, redis_url, training_env) -> Iterator[Demo]:
    call_command("seed_demo")
    for username, password, *_ in DEMO_USERS:  # a hash the servers verify
        set_password(get_user_model().objects.get(username=username), password)
    images = host_tmp / "image-store"
    build_image(images, GUIDE_IMAGE)
    store = {"TRAINYARD_LOCAL_IMAGE_STORE": str(images)}
    with live_servers(host_tmp, redis_url, "registered", extra_env=store) as servers:
        yield Demo(servers, host_tmp)


@pytest.fixture
def unix_account(host_tmp) -> Iterator[pwd.struct_passwd]:
    """Set up before the live system and removed after it has stopped (and killed the
    jobs that ran as its user)."""
    with normal_account(host_tmp) as account:
        yield account


@pytest.fixture
def normal_user(unix_account, demo) -> Terminal:
    """The normal account's terminal and its Trainyard user of the same name, made as an
    admin would, with alice's roles (admin of vision, member of platform) and carol's in nlp."""
    name = unix_account.pw_name
    user = get_user_model().objects.create_user(name, f"{name}@example.com")
    password = secrets.token_urlsafe(12)
    set_password(user, password)
    for vc, role in {"vision": "admin", "platform": "member", "nlp": "admin"}.items():
        set_membership(VirtualCluster.objects.get(name=vc), user, role)
    return demo.terminal("normal", name, password, demo.directory, unix_account)


# --- the checks, by the name a block's info string gives ------------------------------


def succeeds(terminal: Terminal, example: Example | str, **options) -> str:
    """What the block printed; it must have succeeded."""
    done = terminal.run(example, **options)
    assert done.returncode == 0, f"{example}\n{done.stdout}{done.stderr}"
    return done.stdout


def scripted_submission(demo: Demo, terminal: Terminal, example: Example) -> None:
    printed = succeeds(terminal, example)
    submitted, end = json.JSONDecoder().raw_decode(printed)  # then the VC's list
    assert submitted["name"] == "mnist-like" and submitted["owner"] == "alice"
    assert submitted["id"] in printed[end:]
    demo.finishes("alice", submitted["id"])
    assert "rank 0: done" in demo.log("alice", submitted["id"])


def command_line_client(demo: Demo, terminal: Terminal, example: Example) -> None:
    printed = succeeds(terminal, example, stdin=f"{terminal.password}\n")  # login asks
    assert f"as {terminal.user};" in " ".join(printed.split())  # signed in as themselves
    assert "rank 0: done, final loss" in printed  # the log, followed to the job's end
    assert demo.finishes(terminal.user, terminal.variable("JOB"))["owner"] == terminal.user


def real_training_job(demo: Demo, terminal: Terminal, example: Example) -> None:
    printed = succeeds(terminal, example)
    job_id = terminal.variable("JOB")
    assert re.fullmatch(r"[a-z0-9]+", job_id), printed
    demo.finishes(terminal.user, job_id)
    assert "rank 0: step 300/300" in demo.log(terminal.user, job_id)


def token_from_scripts(demo: Demo, terminal: Terminal, example: Example) -> None:
    assert json.loads(succeeds(terminal, example))["username"] == terminal.user


def command_line_session(demo: Demo, terminal: Terminal, example: Example) -> None:
    """The manifest is the guide's YAML block, saved as job.yaml."""
    manifest = example_before(example, "```yaml\n")
    (terminal.cwd / "job.yaml").write_text(manifest)
    (terminal.cwd / "job.yaml").chmod(0o644)
    printed = succeeds(terminal, example, stdin=f"{terminal.user}\n{terminal.password}\n")
    assert f"as {terminal.user};" in " ".join(printed.split())
    job = demo.finishes(terminal.user, terminal.variable("JOB"))
    assert (job["workers"], job["gpus_per_worker"]) == (2, 8)
    assert (job["max_wall_time"], job["max_retries"]) == (7200, 0)  # changed
    assert "rank 1: step 20/20" in printed  # worker 1's log, followed to its end
    assert "Quota" in printed and "The cluster" in printed  # the usage tables
    (from_manifest,) = [
        j for j in demo.api(terminal.user, "jobs/?vc=vision&ordering=-submitted_at").json()
        ["results"] if j["name"] == "mnist-like" and j["owner"] == terminal.user
    ][:1]  # fmt: skip
    assert from_manifest["status"] == "finished"  # --wait exited 0


def example_before(example: Example, fence: str) -> str:
    """The body of the last block opened with ``fence`` before ``example``."""
    text = (ROOT / example.document).read_text()
    at = text.rindex(fence, 0, text.index(example.body))
    return text[at + len(fence) : text.index("```", at + len(fence))]


def submitting_a_job(demo: Demo, terminal: Terminal, example: Example) -> None:
    """The answer is the stored job, in the image the site's store serves; the job is then
    killed (its command is the text's, which the test's small image cannot run), so that
    its 16 GPUs are free for the next blocks."""
    job = json.loads(succeeds(terminal, example))
    assert (job["name"], job["owner"], job["image"]) == ("bert-large", terminal.user, GUIDE_IMAGE)
    stored = demo.api(terminal.user, f"jobs/{job['id']}/").json()
    assert (stored["type"], stored["workers"], stored["gpus_per_worker"]) == ("distributed", 2, 8)
    assert stored["env"] == {"NCCL_DEBUG": "WARN"}
    assert (stored["max_retries"], stored["max_wall_time"], stored["preemptible"]) == (
        3, 172800, False
    )  # fmt: skip
    assert stored["image"] == GUIDE_IMAGE and job["status"] not in ENDED, job
    again = succeeds(terminal, example)  # the same Idempotency-Key: the same job
    assert json.loads(again)["id"] == job["id"]
    demo.call("POST", terminal.user, f"jobs/{job['id']}/kill/")
    demo.job_ends(terminal.user, job["id"])


def elastic_job(demo: Demo, terminal: Terminal, example: Example) -> None:
    """It runs at 2 to 4 workers (the idle demo cluster lets it grow) and its log shows the
    documented step lines, steps in a row; then the test kills it (5000 steps would take
    minutes: a test may stop a documented long job once it has shown what the text
    promises)."""
    job_id = succeeds(terminal, example).strip()
    job = demo.job_reaches(terminal.user, job_id, ("running",))
    assert (job["min_workers"], job["max_workers"]) == (2, 4) and 2 <= job["workers"] <= 4, job

    def stepping() -> list[tuple[str, ...]] | None:
        steps = ELASTIC_STEP.findall(demo.log(terminal.user, job_id))
        return steps if len(steps) >= 3 else None

    steps = wait_until(stepping, JOB_SECONDS, f"elastic job {job_id}'s first steps")
    numbers = [int(step) for step, _world, _loss in steps]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), steps
    assert {int(world) for _step, world, _loss in steps} <= {2, 3, 4}, steps
    demo.call("POST", terminal.user, f"jobs/{job_id}/kill/")
    assert demo.job_ends(terminal.user, job_id)["status"] == "killed"


def deadline_job(demo: Demo, terminal: Terminal, example: Example) -> None:
    """Four hours from now, on the idle demo cluster: met holding 2 workers, as the text
    works out; the job (its command the text's) is then killed."""
    done = terminal.run(example)
    assert done.returncode == 0, f"{example}\n{done.stdout}{done.stderr}"
    job_id = done.stdout.strip()
    said = " ".join(done.stderr.split())
    assert "deadline: meets it with at least 2 workers from now (earliest finish" in said, said
    job = demo.api(terminal.user, f"jobs/{job_id}/").json()
    assert (job["admission"], job["admission_share"]) == ("meets", 2), job
    demo.call("POST", terminal.user, f"jobs/{job_id}/kill/")
    demo.job_ends(terminal.user, job_id)


def following_a_job(demo: Demo, terminal: Terminal, example: Example) -> None:
    command = "python /opt/trainyard/training-env/examples/train_mnist_like.py --steps 5"
    job_id = demo.submit(terminal.user, {"vc": "vision", "gpu_type": "A100", "command": command})
    demo.job_ends(terminal.user, job_id)

    printed = succeeds(terminal, example, also={"k3m9x2q7ab": job_id})

    assert f'"id":"{job_id}"' in printed and '"status":"finished"' in printed
    assert "rank 0: done" in printed  # the log's tail
    (downloaded,) = [path for path in terminal.cwd.iterdir() if job_id in path.name]
    assert "rank 0: done" in downloaded.read_text()


def managing_jobs(demo: Demo, terminal: Terminal, example: Example) -> None:
    """Each call on its own, on a job of the user's in the state it needs."""
    spec = {"vc": "vision", "gpu_type": "A100", "command": "sleep 300"}
    kill_it, pause_it, *batch = [demo.submit(terminal.user, spec) for _ in range(4)]
    kill, pause, resume, batch_kill = example.commands()
    for job_id in (kill_it, pause_it):
        demo.job_reaches(terminal.user, job_id, ("running",))

    succeeds(terminal, kill, also={"k3m9x2q7ab": kill_it})
    assert demo.job_ends(terminal.user, kill_it)["status"] == "killed"
    succeeds(terminal, pause, also={"k3m9x2q7ab": pause_it})
    demo.job_reaches(terminal.user, pause_it, ("paused",))
    succeeds(terminal, resume, also={"k3m9x2q7ab": pause_it})
    assert demo.api(terminal.user, f"jobs/{pause_it}/").json()["status"] != "paused"
    answer = succeeds(terminal, batch_kill, also={"k3m9x2q7ab": batch[0], "p8d2w4r6tz": batch[1]})
    assert [(r["id"], r["ok"]) for r in json.loads(answer)["results"]] == [
        (batch[0], True), (batch[1], True)
    ]  # fmt: skip
    for job_id in batch:
        assert demo.job_ends(terminal.user, job_id)["status"] == "killed"
    demo.call("POST", terminal.user, f"jobs/{pause_it}/kill/")


def keys_and_addresses(demo: Demo, terminal: Terminal, example: Example) -> None:
    ssh = Path(terminal.env["HOME"]) / ".ssh"
    terminal.command(["mkdir", "-m", "700", str(ssh)])
    terminal.command(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{ssh}/id_ed25519"])
    succeeds(terminal, example)
    printed = terminal.command(["ssh-keygen", "-lf", f"{ssh}/id_ed25519.pub"]).stdout
    (key,) = demo.api(terminal.user, "me/ssh-keys/").json()
    assert key["fingerprint"] in printed  # as ssh-keygen -lf prints it
    networks = [ip["network"] for ip in demo.api(terminal.user, "me/allowed-ips/").json()]
    assert networks == ["203.0.113.7/32"]


def storage_usage(demo: Demo, terminal: Terminal, example: Example) -> None:
    succeeds(terminal, example)
    assert (terminal.cwd / "usage.csv").read_text().startswith("root,snapshot_at,")


def vc_admin(demo: Demo, terminal: Terminal, example: Example) -> None:
    """Run as an admin of nlp (carol in root's terminal, the normal user in theirs) on a
    job of alice's there waiting for approval (over the VC's per-user GPU limit, lowered
    for it)."""
    admin = "carol" if terminal.user == "alice" else terminal.user
    limit = demo.call("PATCH", admin, "vcs/nlp/", {"user_gpu_limit": 1})
    assert limit.ok, limit.text
    demo.call("POST", admin, "vcs/nlp/members/", {"username": "alice", "role": "member"})
    spec = {"vc": "nlp", "gpu_type": "A100", "gpus_per_worker": 2, "command": "sleep 300",
            "preemptible": False}  # fmt: skip
    job_id = demo.submit("alice", spec)
    assert demo.api("alice", f"jobs/{job_id}/").json()["status"] == "unapproved"
    terminal.env["VC_ADMIN_AUTH"] = f"Authorization: Token {demo.token(admin)}"

    succeeds(terminal, example, also={"k3m9x2q7ab": job_id, "$AUTH": "$VC_ADMIN_AUTH"})

    vc = demo.api(admin, "vcs/nlp/").json()
    assert (vc["policy"], vc["user_gpu_limit"], vc["max_wall_time"]) == ("RF", 16, 259200)
    assert "bob" not in str(demo.api(admin, "vcs/nlp/members/").json())
    job = demo.api(admin, f"jobs/{job_id}/").json()
    assert job["status"] != "unapproved"
    assert (job["priority"], job["max_wall_time"], job["max_retries"]) == (50, 7200, 0)
    demo.call("POST", admin, f"jobs/{job_id}/kill/")


def cluster_setup(demo: Demo, terminal: Terminal, example: Example) -> None:
    succeeds(terminal, example)
    node = demo.api("admin", "nodes/gpu-01/").json()
    assert (node["gpu_type"], node["gpus"], node["schedulable"]) == ("H100", 8, False), node
    quotas = demo.api("admin", "vcs/speech/quotas/").json()
    assert [(q["gpu_type"], q["gpus"]) for q in quotas] == [("H100", 16)]
    members = demo.api("admin", "vcs/speech/members/").json()
    assert [(m["username"], m["role"]) for m in members] == [("dave", "admin")]


def dedicated_node(demo: Demo, terminal: Terminal, example: Example) -> None:
    succeeds(terminal, example)
    assert demo.api("admin", "nodes/gpu-01/").json()["dedicated_vc"] == "speech"


def node_switch(demo: Demo, terminal: Terminal, example: Example) -> None:
    succeeds(terminal, example)
    node = demo.api("admin", "nodes/gpu-01/").json()
    assert (node["switch"], node["rack"]) == ("ib-leaf-3", "r12")


Check = Callable[[Demo, Terminal, Example], None]
CHECKS: dict[str, dict[str, Check]] = {
    "README.md": {
        "scripted-submission": scripted_submission,
        "command-line-client": command_line_client,
        "real-training-job": real_training_job,
    },
    "docs/user-guide.md": {
        "token-from-scripts": token_from_scripts,
        "command-line-session": command_line_session,
        "submitting-a-job": submitting_a_job,
        "elastic-job": elastic_job,
        "deadline-job": deadline_job,
        "following-a-job": following_a_job,
        "managing-jobs": managing_jobs,
        "keys-and-addresses": keys_and_addresses,
        "storage-usage": storage_usage,
        "vc-admin": vc_admin,
    },
    "docs/operations.md": {
        "cluster-setup": cluster_setup,
        "dedicated-node": dedicated_node,
        "node-switch": node_switch,
    },
}


# Blocks run by a test of their own (``alone``), by document: the test's module.
ALONE_CHECKS = {"README.md": {"make-run": "tests/test_docs_make_run.py"}}


def test_every_shell_example_is_run_or_marked_not_to_be_with_a_reason():
    for document in DOCUMENTS:
        examples = shell_examples(document)
        unmarked = [str(e) for e in examples if e.check is None and not e.not_run]
        assert unmarked == [], "mark each: ```sh test=NAME or ```sh no-test=REASON"
        no_reason = [str(e) for e in examples if e.not_run and not e.reason]
        assert no_reason == [], "say why it is not run: ```sh no-test=REASON"
        named = [e.check for e in examples if e.check is not None and not e.alone]
        assert sorted(named) == sorted(CHECKS.get(document, {})), document
        alone = [e.check for e in examples if e.check is not None and e.alone]
        assert sorted(alone) == sorted(ALONE_CHECKS.get(document, {})), document
        for module in ALONE_CHECKS.get(document, {}).values():
            assert (ROOT / module).is_file()


def test_a_fence_says_how_its_block_is_run():
    bare = Example("x.md", 1, "sh no-test", "make run\n")
    given = Example("x.md", 1, "sh no-test=starts-the-system", "make run\n")
    admin = Example("x.md", 1, "sh test=cluster-setup as=admin", "a \\\n  b\n# c\nd  # e\n")
    alone = Example("x.md", 1, "sh test=make-run as=admin alone", "make run\n")
    assert (bare.not_run, bare.reason, bare.check) == (True, "", None)  # refused above
    assert (given.not_run, given.reason) == (True, "starts-the-system")
    assert (admin.check, admin.admin_only, admin.not_run) == ("cluster-setup", True, False)
    assert (admin.alone, alone.alone, alone.check, alone.admin_only) == (
        False, True, "make-run", True
    )  # fmt: skip
    assert admin.commands() == ["a    b", "d  # e"]


def run_document(demo: Demo, terminal: Terminal, document: str) -> None:
    """The document's blocks in order; a normal user's terminal skips the admins'."""
    for example in shell_examples(document):
        if example.check and not example.alone and not (terminal.account and example.admin_only):
            CHECKS[document][example.check](demo, terminal, example)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_documents_examples_run_as_root_then_as_a_normal_user(demo, normal_user):
    readme = demo.terminal("root-readme", "alice", "alice-demo", cwd=ROOT)
    readme.substitutions = {PORTAL[0]: demo.servers.base_url}
    run_document(demo, readme, "README.md")

    guide = demo.terminal("root-guide", "alice", "alice-demo", cwd=demo.directory / "alice")
    guide.cwd.mkdir()
    guide.substitutions = {PORTAL[1]: demo.servers.base_url, "ty_...": demo.token("alice")}
    run_document(demo, guide, "docs/user-guide.md")

    operations = demo.terminal("root-ops", "admin", "admin-demo", cwd=demo.directory)
    operations.substitutions = {PORTAL[1]: demo.servers.base_url}
    operations.env["TOKEN"] = demo.token("admin")  # as manage.py issue_token ops --admin printed
    run_document(demo, operations, "docs/operations.md")

    # A normal user: their own token in TOKEN (made in the dashboard), their CLI.
    name, token = normal_user.user, demo.token(normal_user.user)
    normal_user.cwd = ROOT
    normal_user.substitutions = {
        PORTAL[0]: demo.servers.base_url, ".venv/bin/trainyard": "trainyard",
        "--username alice": f"--username {name}",
    }  # fmt: skip
    normal_user.env["TOKEN"] = token
    run_document(demo, normal_user, "README.md")

    normal_user.cwd = Path(normal_user.account.pw_dir)
    normal_user.state.write_text("")
    normal_user.substitutions = {PORTAL[1]: demo.servers.base_url, "ty_...": token}
    run_document(demo, normal_user, "docs/user-guide.md")
