"""The SSH gateway against OpenSSH's own sshd on the same host, in the same run.

    .venv/bin/python -m bench.ssh.run [--rounds 20] [--size-mib 1024]

Run as root. Starts the embedded system as ``make run`` does (``manage.py run_trainyard``,
the gateway included, on a fresh SQLite database), submits one job as the user ``bench``
(Unix account ``ty-test-bench``) with an SSH key made here, and once it runs starts
Debian's ``/usr/sbin/sshd`` on another port with a configuration of its own, admitting the
same key for the same account. Then, against each server in turn:

- connect: from starting ``ssh -tt`` to the first byte of the shell's prompt (``$ ``),
  ``--rounds`` times (median and p95);
- scp up and down: ``scp`` of a ``--size-mib`` file of random bytes into the job's working
  directory and back (SFTP, as OpenSSH's scp speaks by default), in MiB/s.

Goals (issue: SSH gateway): connect under 300 ms; scp at least half of sshd's rate.
Ports: ``--web-port`` (21410), ``--gateway-port`` (21411), ``--sshd-port`` (21412).
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS = REPO_ROOT / "bench" / "results" / "ssh.json"
ACCOUNT_ENV = {"TRAINYARD_UNIX_NAME_PREFIX": "ty-test-", "TRAINYARD_UNIX_UID_RANGE": "61000-61999"}
ACCOUNT = "ty-test-bench"
CLIENT_OPTIONS = [
    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-F", "/dev/null",
]  # fmt: skip
SETUP = """
from decimal import Decimal
from backend.accounts.actions import add_ssh_key, create_api_token
from backend.clusters.models import GpuType, Node
from backend.vcs.models import Membership, Quota, Role, VirtualCluster
from django.contrib.auth import get_user_model
a100 = GpuType.objects.create(name="A100", cpus_per_gpu=Decimal(1), memory_per_gpu=4096)
Node.objects.create(name="bench-0", gpu_type=a100, gpus=8, cpus=16, memory=32768)
vc = VirtualCluster.objects.create(name="bench")
Quota.objects.create(vc=vc, gpu_type=a100, gpus=8, cpus=16, memory=32768)
user = get_user_model().objects.create_user("bench")
Membership.objects.create(vc=vc, user=user, role=Role.MEMBER)
add_ssh_key(user, open({public_key!r}).read())
print(create_api_token(user, "bench")[1])
"""
SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {directory}/sshd_host_key
PidFile {directory}/sshd.pid
AuthorizedKeysFile {directory}/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PrintMotd no
PrintLastLog no
AllowUsers {account}
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def manage(env: dict[str, str], *arguments: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=REPO_ROOT, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def time_to_prompt(argv: list[str], timeout: float = 20) -> float:
    """Seconds from starting ``argv`` (ssh -tt) on a terminal to the prompt's ``$ ``."""
    began = time.monotonic()
    pid, master = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    seen = b""
    try:
        while b"$ " not in seen:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise SystemExit(f"no prompt from {argv} after {timeout}s: {seen!r}")
            seen += os.read(master, 4096)
        return time.monotonic() - began
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        os.close(master)


def scp_rate(argv: list[str], size_mib: int) -> float:
    began = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    return size_mib / (time.monotonic() - began)


def measure(name: str, ssh: list[str], scp: list[str], remote: str, payload: Path,
            size_mib: int, rounds: int, work_dir: Path) -> dict:  # fmt: skip
    connects = [time_to_prompt([*ssh, "-tt"]) for _ in range(rounds)]
    target = f"{work_dir}/{name}.bin"
    up = scp_rate([*scp, str(payload), f"{remote}:{target}"], size_mib)
    back = payload.with_name(f"{name}.back")
    down = scp_rate([*scp, f"{remote}:{target}", str(back)], size_mib)
    if back.stat().st_size != payload.stat().st_size:
        raise SystemExit(f"{name}: the file came back truncated")
    back.unlink()
    Path(target).unlink()
    return {
        "server": name,
        "connect_p50_ms": round(statistics.median(connects) * 1000, 1),
        "connect_p95_ms": round(percentile(connects, 0.95) * 1000, 1),
        "scp_up_mib_s": round(up, 1),
        "scp_down_mib_s": round(down, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--web-port", type=int, default=21410)
    parser.add_argument("--gateway-port", type=int, default=21411)
    parser.add_argument("--sshd-port", type=int, default=21412)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("Run as root: the job runs as its owner's account, sshd logs in as it.")

    directory = Path(tempfile.mkdtemp(prefix="trainyard-ssh-bench-"))
    directory.chmod(0o711)
    key = directory / "id_bench"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= ACCOUNT_ENV | {
        "TRAINYARD_VAR_DIR": str(directory / "var"),
        "TRAINYARD_BACKEND": "local",
        "TRAINYARD_LOG_LEVEL": os.environ.get("TRAINYARD_LOG_LEVEL", "WARNING"),
        "TRAINYARD_SSH_PORT": str(args.gateway_port),
        "TRAINYARD_SSH_LISTEN": "127.0.0.1",
    }
    manage(env, "migrate", "--verbosity", "0")
    setup = SETUP.format(public_key=f"{key}.pub")
    token = manage(env, "shell", "-c", setup).strip().splitlines()[-1]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    system_log = (RESULTS.parent / "ssh-system.log").open("wb")
    system = subprocess.Popen(
        [sys.executable, "manage.py", "run_trainyard", "--no-demo", "--port", str(args.web_port)],
        cwd=REPO_ROOT, env=env, stdout=system_log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    sshd = None
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    base = f"http://127.0.0.1:{args.web_port}/api/v1"
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{args.web_port}/healthz"), 180, "the portal")
        body = {"vc": "bench", "gpu_type": "A100", "command": "sleep 3600", "gpus_per_worker": 1}
        job_id = session.post(f"{base}/jobs/", json=body, timeout=10).json()["id"]
        wait_for(
            lambda: session.get(f"{base}/jobs/{job_id}/", timeout=10).json()["status"] == "running",
            120,
            "the job to run",
        )
        work_dir = directory / "var" / "local-backend" / job_id / "work"

        # OpenSSH's sshd for the same account (its password field unlocked to "*", no
        # password: sshd without PAM refuses accounts marked locked).
        subprocess.run(["usermod", "-p", "*", ACCOUNT], check=True)
        (directory / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
        (directory / "authorized_keys").chmod(0o644)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        str(directory / "sshd_host_key")], check=True)  # fmt: skip
        config = directory / "sshd_config"
        config.write_text(
            SSHD_CONFIG.format(port=args.sshd_port, directory=directory, account=ACCOUNT)
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        sshd = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
            stdout=system_log,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: _listening(args.sshd_port), 30, "sshd")

        payload = directory / "payload.bin"
        with payload.open("wb") as file:
            for _ in range(args.size_mib):
                file.write(os.urandom(1024 * 1024))
        payload.chmod(0o644)
        results = []
        for name, port, login in (
            ("gateway", args.gateway_port, f"bench+{job_id}"),
            ("sshd", args.sshd_port, ACCOUNT),
        ):
            ssh = ["ssh", "-i", str(key), "-p", str(port), *CLIENT_OPTIONS, f"{login}@127.0.0.1"]
            scp = ["scp", "-q", "-i", str(key), "-P", str(port), *CLIENT_OPTIONS]
            results.append(
                measure(
                    name,
                    ssh,
                    scp,
                    f"{login}@127.0.0.1",
                    payload,
                    args.size_mib,
                    args.rounds,
                    work_dir,
                )
            )
            print(f"measured {name}", file=sys.stderr)
    finally:
        if sshd is not None:
            sshd.terminate()
            sshd.wait(timeout=30)
        os.killpg(system.pid, signal.SIGTERM)
        system.wait(timeout=60)
        shutil.rmtree(directory, ignore_errors=True)

    gateway, direct = results
    print(f"{'server':<10}{'connect p50 ms':>16}{'p95 ms':>9}{'scp up MiB/s':>14}"
          f"{'scp down MiB/s':>16}")  # fmt: skip
    for row in results:
        print(f"{row['server']:<10}{row['connect_p50_ms']:>16}{row['connect_p95_ms']:>9}"
              f"{row['scp_up_mib_s']:>14}{row['scp_down_mib_s']:>16}")  # fmt: skip
    ratios = {
        "connect_p50": round(gateway["connect_p50_ms"] / direct["connect_p50_ms"], 2),
        "scp_up": round(gateway["scp_up_mib_s"] / direct["scp_up_mib_s"], 2),
        "scp_down": round(gateway["scp_down_mib_s"] / direct["scp_down_mib_s"], 2),
    }
    print(
        f"gateway / sshd: connect x{ratios['connect_p50']}, scp up x{ratios['scp_up']}, "
        f"scp down x{ratios['scp_down']}"
    )
    connect_met = gateway["connect_p50_ms"] < 300
    scp_met = min(ratios["scp_up"], ratios["scp_down"]) >= 0.5
    print(f"Goal connect < 300 ms: {'met' if connect_met else 'NOT met'}; "
          f"scp >= half of sshd's rate: {'met' if scp_met else 'NOT met'}")  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"results": results, "ratios": ratios}, indent=2))
    return 0


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    sys.exit(main())
