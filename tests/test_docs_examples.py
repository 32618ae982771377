"""Every shell example of README.md and docs/user-guide.md runs as written against a live
system and does what its text says.

The examples are read from the Markdown at test time (tests/docs_examples.py; the
convention is in docs/user-guide.md, "Examples in these documents"). The live system is
``make run``'s: the demo cluster and users (seed_demo), gunicorn, a Celery worker and beat
on the local backend over the registered nodes, jobs as their owners' accounts in the
training environment. The examples run as root, in bash, one document's blocks in order
as in one terminal (what a block sets, the next one sees), each with ``set -e`` and a
``curl`` that fails on a refused request; the address the documents give for the portal
is the live one's, and the user guide's placeholders (a token, job ids) are real ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from django.contrib.auth import get_user_model
from django.core.management import call_command

from backend.accounts.actions import create_api_token
from backend.core.management.commands.seed_demo import DEMO_USERS
from tests.docs_examples import DOCUMENTS, ROOT, Example, shell_examples
from tests.e2e.dashboard import LiveServers, live_servers, set_password
from tests.jobmanager.test_local_backend import wait_for
from tests.unix_accounts import TEST_ACCOUNT_ENV, reachable_directory

JOB_SECONDS = 300  # a training job's start, 300 steps and end, on loaded cores
# Each block: errors stop it, a refused request is an error, what it sets is kept.
PRELUDE = """set -euo pipefail
curl() { command curl --fail-with-body "$@"; }
"""
ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", re.M)


@dataclass
class Demo:
    """The live demo system and the terminal the examples run in."""

    servers: LiveServers
    env: dict[str, str]
    state: Path
    cwd: Path
    substitutions: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, username: str) -> str:
        if username not in self.tokens:
            user = get_user_model().objects.get(username=username)
            self.tokens[username] = create_api_token(user, "docs examples")[1]
        return self.tokens[username]

    def api(self, username: str, path: str) -> requests.Response:
        return requests.get(
            f"{self.servers.base_url}/api/v1/{path}",
            headers={"Authorization": f"Token {self.token(username)}"},
            timeout=30,
        )

    def run(
        self, example: Example, stdin: str = "", also: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run the block in the terminal, its placeholders (and ``also``'s) replaced."""
        body = example.body
        for placeholder, value in (self.substitutions | (also or {})).items():
            body = body.replace(placeholder, value)
        names = sorted(set(ASSIGNMENT.findall(body)))
        keep = f"declare -p {' '.join(names)} >> {self.state}\n" if names else ""
        script = f"{PRELUDE}. {self.state}\n{body}\n{keep}"
        return subprocess.run(
            ["bash", "-c", script], cwd=self.cwd, env=self.env, input=stdin,
            capture_output=True, text=True, timeout=JOB_SECONDS, start_new_session=True,
        )  # fmt: skip

    def variable(self, name: str) -> str:
        done = subprocess.run(
            ["bash", "-c", f'. {self.state}; printf %s "${name}"'], capture_output=True, text=True
        )
        return done.stdout

    def job_ends(self, username: str, job_id: str) -> dict:
        def ended() -> dict | None:
            job = self.api(username, f"jobs/{job_id}/").json()
            return job if job["status"] in ("finished", "failed", "killed") else None

        return wait_for(ended, f"job {job_id} to end", JOB_SECONDS)

    def log(self, username: str, job_id: str) -> str:
        return self.api(username, f"jobs/{job_id}/log/tail/?worker=0").json()["text"]


@pytest.fixture
def demo(transactional_db, host_tmp, redis_url, training_env) -> Iterator[Demo]:
    call_command("seed_demo")
    for username, password, *_ in DEMO_USERS:  # a hash the servers verify
        set_password(get_user_model().objects.get(username=username), password)
    with live_servers(host_tmp, redis_url, "registered") as servers, reachable_directory() as home:
        state = host_tmp / "terminal.sh"
        state.write_text("")
        env = os.environ | TEST_ACCOUNT_ENV | servers.env | {"HOME": str(home)}
        yield Demo(servers, env, state, cwd=ROOT)


# --- the checks, by the name a block's info string gives ------------------------------


def scripted_submission(demo: Demo, example: Example) -> None:
    done = demo.run(example)
    assert done.returncode == 0, done.stdout + done.stderr
    submitted, end = json.JSONDecoder().raw_decode(done.stdout)  # then the VC's list
    assert submitted["name"] == "mnist-like" and submitted["owner"] == "alice"
    assert submitted["id"] in done.stdout[end:]
    assert demo.job_ends("alice", submitted["id"])["status"] == "finished"
    assert "rank 0: done" in demo.log("alice", submitted["id"])


def command_line_client(demo: Demo, example: Example) -> None:
    done = demo.run(example, stdin="alice-demo\n")  # the password login asks for
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0: done, final loss" in done.stdout  # the log, followed to the job's end
    assert demo.job_ends("alice", demo.variable("JOB"))["status"] == "finished"


def real_training_job(demo: Demo, example: Example) -> None:
    done = demo.run(example)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = demo.variable("JOB")
    assert re.fullmatch(r"[a-z0-9]+", job_id), done.stdout
    assert demo.job_ends("alice", job_id)["status"] == "finished"
    assert "rank 0: step 300/300" in demo.log("alice", job_id)


def token_from_scripts(demo: Demo, example: Example) -> None:
    done = demo.run(example)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["username"] == "alice"


def following_a_job(demo: Demo, example: Example) -> None:
    command = "python /opt/trainyard/training-env/examples/train_mnist_like.py --steps 5"
    submitted = requests.post(
        f"{demo.servers.base_url}/api/v1/jobs/",
        json={"vc": "vision", "gpu_type": "A100", "command": command},
        headers={"Authorization": f"Token {demo.token('alice')}"},
        timeout=30,
    )
    job_id = submitted.json()["id"]
    demo.job_ends("alice", job_id)

    done = demo.run(example, also={"k3m9x2q7ab": job_id})

    assert done.returncode == 0, done.stdout + done.stderr
    assert f'"id":"{job_id}"' in done.stdout and '"status":"finished"' in done.stdout
    assert "rank 0: done" in done.stdout  # the log's tail
    (downloaded,) = [path for path in demo.cwd.iterdir() if job_id in path.name]
    assert "rank 0: done" in downloaded.read_text()


def keys_and_addresses(demo: Demo, example: Example) -> None:
    ssh = Path(demo.env["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "id_ed25519")], check=True
    )
    done = demo.run(example)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = subprocess.run(
        ["ssh-keygen", "-lf", str(ssh / "id_ed25519.pub")], capture_output=True, text=True
    ).stdout
    (key,) = demo.api("alice", "me/ssh-keys/").json()
    assert key["fingerprint"] in printed  # as ssh-keygen -lf prints it
    networks = [ip["network"] for ip in demo.api("alice", "me/allowed-ips/").json()]
    assert networks == ["203.0.113.7/32"]


def storage_usage(demo: Demo, example: Example) -> None:
    done = demo.run(example)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (demo.cwd / "usage.csv").read_text().startswith("root,snapshot_at,")


def vc_admin(demo: Demo, example: Example) -> None:
    """Run as carol, admin of nlp, on a job of alice's there waiting for approval (over
    the VC's per-user GPU limit, lowered for it)."""
    carol = {"Authorization": f"Token {demo.token('carol')}"}
    api = f"{demo.servers.base_url}/api/v1"
    limit = requests.patch(f"{api}/vcs/nlp/", json={"user_gpu_limit": 1}, headers=carol, timeout=30)
    assert limit.ok, limit.text
    spec = {"vc": "nlp", "gpu_type": "A100", "gpus_per_worker": 2, "command": "sleep 300",
            "preemptible": False}  # fmt: skip
    alice = {"Authorization": f"Token {demo.token('alice')}"}
    member = {"username": "alice", "role": "member"}
    assert requests.post(f"{api}/vcs/nlp/members/", json=member, headers=carol, timeout=30).ok
    job = requests.post(f"{api}/jobs/", json=spec, headers=alice, timeout=30).json()
    assert job["status"] == "unapproved", job
    demo.env["VC_ADMIN_AUTH"] = f"Authorization: {carol['Authorization']}"

    done = demo.run(example, also={"k3m9x2q7ab": job["id"], "$AUTH": "$VC_ADMIN_AUTH"})

    assert done.returncode == 0, done.stdout + done.stderr
    vc = demo.api("carol", "vcs/nlp/").json()
    assert (vc["policy"], vc["user_gpu_limit"], vc["max_wall_time"]) == ("RF", 16, 259200)
    members = demo.api("carol", "vcs/nlp/members/").json()
    assert "bob" not in str(members)
    job = demo.api("carol", f"jobs/{job['id']}/").json()
    assert job["status"] != "unapproved"
    assert (job["priority"], job["max_wall_time"], job["max_retries"]) == (50, 7200, 0)
    requests.post(f"{api}/jobs/{job['id']}/kill/", headers=carol, timeout=30)


Check = Callable[[Demo, Example], None]
README_CHECKS: dict[str, Check] = {
    "scripted-submission": scripted_submission,
    "command-line-client": command_line_client,
    "real-training-job": real_training_job,
}
GUIDE_CHECKS: dict[str, Check] = {
    "token-from-scripts": token_from_scripts,
    "following-a-job": following_a_job,
    "keys-and-addresses": keys_and_addresses,
    "storage-usage": storage_usage,
    "vc-admin": vc_admin,
}
CHECKS = {"README.md": README_CHECKS, "docs/user-guide.md": GUIDE_CHECKS}


def test_every_shell_example_is_run_or_marked_not_to_be():
    for document in DOCUMENTS:
        examples = shell_examples(document)
        unmarked = [str(e) for e in examples if e.check is None and not e.not_run]
        assert unmarked == [], "mark each: ```sh test=NAME or ```sh no-test"
        named = [e.check for e in examples if e.check is not None]
        assert sorted(named) == sorted(CHECKS[document]), document


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_readme_s_examples_run_in_order_and_do_what_it_says(demo):
    demo.substitutions = {"http://localhost:8000": demo.servers.base_url}
    for example in shell_examples("README.md"):
        if example.check:
            README_CHECKS[example.check](demo, example)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_user_guide_s_examples_run_in_order_and_do_what_it_says(demo, host_tmp):
    demo.cwd = host_tmp / "terminal"
    demo.cwd.mkdir()
    demo.substitutions = {
        "https://trainyard.example.com": demo.servers.base_url,
        "ty_...": demo.token("alice"),
    }
    for example in shell_examples("docs/user-guide.md"):
        if example.check:
            GUIDE_CHECKS[example.check](demo, example)
