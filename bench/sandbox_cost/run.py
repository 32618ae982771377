"""The CPU and wall time one local-backend job costs, bare and in the runc sandbox.

    .venv/bin/python -m bench.sandbox_cost.run [--jobs 30] [--sandbox none,runc]

As root. For each sandbox, one after the other in one run: ``--jobs`` one-worker ``true``
jobs through ``LocalBackend`` directly (its inits forked by a resident spawner, as
``make run`` starts them), one at a time: deployed, waited for until the backend reports the
end, removed; then what removals left to the reaper is finished. It prints, per job, the
wall time of deploy, of deploy to the end reported and of the removal (medians), and the
CPU time of every process involved: the bench's process (the backend), the spawner and
whatever either forked (inits, ``runc``, ``runc init``, ``ip``), read from a cpuacct
cgroup (v1) the bench runs in, plus the containers' own cgroup parent (``runc init``
once it joined the container's cgroup, tini, the command). Kernel threads (a namespace's
clean-up) are not counted. The sandboxed backend uses a bridge and a /24 of its own,
removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from jobmanager.backends.base import JobLaunch, RunAs, WorkerSpec
from jobmanager.backends.local import LocalBackend
from jobmanager.backends.sandbox import cgroup_parent, remove_cgroup_parent, remove_runtime_dir

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
SPAWNER = Path(__file__).resolve().parents[2] / "jobmanager" / "backends" / "local_spawner.py"
NOBODY = RunAs(uid=65534, gid=65534, groups=(), name="nobody")


def cpu_seconds(cgroup: Path) -> float:
    """The CPU time charged to a cpuacct cgroup and its descendants, in seconds (0 where
    it is not there)."""
    try:
        return int((cgroup / "cpuacct.usage").read_text()) / 1e9
    except OSError:
        return 0.0


@contextlib.contextmanager
def own_cpuacct_cgroup() -> Iterator[Path]:
    """This process (and all it forks from now on) in a cpuacct cgroup of its own."""
    cgroup = CPUACCT / f"trainyard-sandbox-cost-{os.getpid()}"
    cgroup.mkdir()
    try:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))
        yield cgroup
    finally:
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        with contextlib.suppress(OSError):
            cgroup.rmdir()


@contextlib.contextmanager
def running_spawner(socket_path: Path) -> Iterator[None]:
    """The resident spawner of inits, listening on ``socket_path``."""
    spawner = subprocess.Popen(
        [sys.executable, "-I", "-S", str(SPAWNER), "--socket", str(socket_path)],
        stdout=subprocess.PIPE,
    )
    try:
        assert spawner.stdout is not None
        spawner.stdout.readline()  # "listening on ..."
        yield
    finally:
        spawner.terminate()
        spawner.wait()


def own_cpu_seconds() -> float:
    """The CPU time of this process (the backend, all its threads) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_job(backend: LocalBackend) -> tuple[float, float, float]:
    """Deploy a ``true`` job, wait for its end, remove it: the three steps' wall times."""
    job_id = f"c{uuid.uuid4().hex[:9]}"
    launch = JobLaunch(
        job_id=job_id, attempt=1, name="cost", owner="nobody", vc="bench", command="true",
        workers=(WorkerSpec(0, "local-0", (), 1000, 256),), run_as=NOBODY,
    )  # fmt: skip
    started = time.perf_counter()
    backend.deploy(launch)
    deployed = time.perf_counter()
    status_file = backend.state_dir / job_id / "a1-worker-0.status.json"
    while not status_file.exists():  # cheaper than the backend's reports, polled
        time.sleep(0.002)
    while not (report := backend.reports()[job_id]).ended:  # the init exiting
        time.sleep(0.002)
    ended = time.perf_counter()
    if report.workers[0].exit_code != 0:
        log = (backend.log_dir / job_id / "worker-0.log").read_text()
        raise SystemExit(f"job {job_id} failed: {report.workers[0]}\n{log}")
    backend.remove(job_id)
    removed = time.perf_counter()
    return deployed - started, ended - started, removed - ended


def measure(sandbox: str, jobs: int, directory: Path, cgroup: Path) -> dict[str, float]:
    """Per-job medians (ms) and CPU (ms) of ``jobs`` jobs with ``sandbox``."""
    options: dict[str, object] = {"sandbox": sandbox}
    if sandbox != "none":
        third = 200 + secrets.randbelow(50)
        options |= {
            "sandbox_bridge": f"tycost{secrets.token_hex(3)}",
            "sandbox_subnet": f"10.88.{third}.0/24",
            "sandbox_egress_nat": False,
        }
    state_dir = directory / sandbox / "state"
    containers = CPUACCT / cgroup_parent(state_dir) if sandbox != "none" else None
    with running_spawner(directory / f"{sandbox}.sock"):
        backend = LocalBackend(
            state_dir, directory / sandbox / "logs", nodes="local-0:A100:8",
            cgroup_root=None, device_dir=None, spawner_socket=directory / f"{sandbox}.sock",
            **options,
        )  # fmt: skip
        try:
            one_job(backend)  # warm: the spares made, the first container's cgroups
            backend.finish_removals()
            time.sleep(0.5)  # the spare namespaces' thread
            before = cpu_seconds(cgroup) + (cpu_seconds(containers) if containers else 0)
            own_before = own_cpu_seconds()
            steps = [one_job(backend) for _ in range(jobs)]
            backend.finish_removals()
            own_after = own_cpu_seconds()
            after = cpu_seconds(cgroup) + (cpu_seconds(containers) if containers else 0)
        finally:
            if backend._network is not None:
                backend._network.tear_down()
            remove_cgroup_parent(backend.state_dir)
            remove_runtime_dir(backend.state_dir)
    return {
        "deploy_ms": 1000 * statistics.median(step[0] for step in steps),
        "to_end_ms": 1000 * statistics.median(step[1] for step in steps),
        "remove_ms": 1000 * statistics.median(step[2] for step in steps),
        "cpu_ms": 1000 * (after - before) / jobs,
        "backend_cpu_ms": 1000 * (own_after - own_before) / jobs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--sandbox", default="none,runc", help="comma-separated: none, runc")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root: the sandbox and the cpuacct cgroup need it")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.jobs} jobs each")
    print("sandbox  deploy_ms  to_end_ms  remove_ms  cpu_ms_per_job  of_it_backend_ms")
    with tempfile.TemporaryDirectory(prefix="sandbox-cost-") as scratch:
        directory = Path(scratch)
        directory.chmod(0o755)
        with own_cpuacct_cgroup() as cgroup:
            for sandbox in args.sandbox.split(","):
                result = measure(sandbox, args.jobs, directory, cgroup)
                print(
                    f"{sandbox:7}  {result['deploy_ms']:9.1f}  {result['to_end_ms']:9.1f}"
                    f"  {result['remove_ms']:9.1f}  {result['cpu_ms']:14.1f}"
                    f"  {result['backend_cpu_ms']:16.1f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
