"""The Slurm backend against a plain ``sbatch`` of the same work: submit to running.

    .venv/bin/python -m bench.slurm_backend.run [--jobs 20]

Starts the 3-node Slurm cluster of the tests (tests/slurm_cluster.py; root, Slurm from
deploy/install-system-packages.sh) and, alternating, one job at a time:

- trainyard: ``SlurmBackend.deploy`` of a 2-worker gang on node1 and node2 (as the job
  manager's deploy task calls it), until both workers' steps have started their command
  (the marks ``reports()`` reads);
- sbatch: ``sbatch --uid -N2 --nodelist=node1,node2`` of a batch script that starts the
  same command with one ``srun`` over both nodes, until both tasks have started it.

Both are timed by this process's clock, polling every 10 ms; each job is cancelled and
the nodes are idle again before the next. This is the backend's share of submit to
running; the job manager's pass before it is measured by bench.local_latency.
Goal (issue 30): at most 1.3x plain sbatch.

    .venv/bin/python -m bench.slurm_backend.run --burst 1000

The burst: 1,000 one-worker jobs handed to Slurm as fast as each side can, alternating
sides: ``SlurmBackend.deploy`` of each inside one ``nodes_pinned()`` (one ``sinfo`` for
the batch, as the job manager's deploy round does) in 8 threads (``TRAINYARD_DEPLOY_THREADS``,
as the job manager deploys a round), against a loop of plain ``sbatch``
of the same script. Measured: jobs accepted by the controller per second, until the last
job id is back. Every job is cancelled (``scancel --user``) before the other side runs,
and the side that goes first alternates from round to round (the controller still holds
the cancelled jobs of the side before). Where Trainyard's time goes is printed beside
the rates: per job, the thread time spent waiting for ``sbatch`` and on its own work
(directories, state, script), and each side's CPU time (this process, and its ``sbatch``
children). Goal (issue 30): at least Slurm's own rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jobmanager.backends import JobLaunch, RunAs, WorkerSpec
from jobmanager.backends.slurm import SlurmBackend
from jobmanager.backends.slurm_commands import SlurmCommands
from tests.slurm_cluster import running_cluster, wait_until_idle
from tests.unix_accounts import job_account, owned_directory

POLL_SECONDS = 0.01
TIMEOUT_SECONDS = 60.0
DEPLOY_THREADS = 8  # TRAINYARD_DEPLOY_THREADS default: the threads of a deploy round


def timed(submit: Callable[[], None], started: Callable[[], bool]) -> float:
    begin = time.perf_counter()
    submit()
    while not started():
        if time.perf_counter() - begin > TIMEOUT_SECONDS:
            raise TimeoutError("the job did not start")
        time.sleep(POLL_SECONDS)
    return time.perf_counter() - begin


def trainyard_once(backend: SlurmBackend, account: RunAs, index: int) -> float:
    """Deploy a 2-worker gang until both workers' steps have started their command."""
    launch = JobLaunch(
        job_id=f"bench{index:05d}", attempt=1, name="bench", owner=account.name, vc="bench",
        command="sleep 60", run_as=account,
        workers=(WorkerSpec(0, "node1", (0,), 1000, 64), WorkerSpec(1, "node2", (0,), 1000, 64)),
    )  # fmt: skip
    marks = [backend.state_dir / launch.job_id / "a1" / f"worker-{rank}.started" for rank in (0, 1)]
    seconds = timed(lambda: backend.deploy(launch), lambda: all(m.exists() for m in marks))
    assert backend.reports()[launch.job_id].started
    backend.stop(launch.job_id, 0)
    backend.remove(launch.job_id)
    return seconds


def sbatch_once(slurm: SlurmCommands, account: RunAs, plain: Path, index: int) -> float:
    """The same work with sbatch: one srun over both nodes, until both tasks have started."""
    marks = [plain / f"{index}.{rank}" for rank in (0, 1)]
    script = (
        f"#!/bin/sh\nsrun -N2 -n2 --gres=gpu:1 sh -c ': > {plain}/{index}.$SLURM_PROCID; "
        "exec sleep 60'\n"
    )
    options = ["-N2", "-n2", "--nodelist=node1,node2", "--gres=gpu:1", "--mem=64",
               "--output=/dev/null"]  # fmt: skip
    ids: list[int] = []
    seconds = timed(
        lambda: ids.append(slurm.submit(script, account.uid, account.gid, options)),
        lambda: all(mark.exists() for mark in marks),
    )
    slurm.cancel(ids[0])
    return seconds


class TimedCommands(SlurmCommands):
    """Slurm's commands, counting the thread time spent in ``sbatch`` (any thread)."""

    def __init__(self, conf: str) -> None:
        super().__init__(conf)
        self.submit_seconds = 0.0
        self._lock = threading.Lock()

    def submit(self, script: str, uid: int, gid: int, options: list[str]) -> int:
        begin = time.perf_counter()
        try:
            return super().submit(script, uid, gid, options)
        finally:
            with self._lock:
                self.submit_seconds += time.perf_counter() - begin


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds of this process and of its ended children (the ``sbatch`` runs)."""
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


def burst_trainyard(
    backend: SlurmBackend, account: RunAs, jobs: int, round_: int
) -> dict[str, float]:
    """Deploy ``jobs`` one-worker jobs in one round (one sinfo), in the job manager's
    deploy threads: the rate, and where each job's time went."""
    launches = [
        JobLaunch(
            job_id=f"burst{round_}x{index:05d}", attempt=1, name="burst", owner=account.name,
            vc="bench", command="sleep 600", run_as=account,
            workers=(WorkerSpec(0, f"node{index % 3 + 1}", (), 1000, 16),),
        )
        for index in range(jobs)
    ]  # fmt: skip
    commands = backend.slurm
    assert isinstance(commands, TimedCommands)
    commands.submit_seconds = 0.0
    thread_seconds = [0.0] * jobs

    def deploy(index: int) -> None:
        begin = time.perf_counter()
        backend.deploy(launches[index])
        thread_seconds[index] = time.perf_counter() - begin

    own_before, children_before = cpu_seconds()
    begin = time.perf_counter()
    with backend.nodes_pinned(), ThreadPoolExecutor(DEPLOY_THREADS) as pool:
        list(pool.map(deploy, range(jobs)))
    seconds = time.perf_counter() - begin
    own_after, children_after = cpu_seconds()
    return {
        "jobs_per_s": round(jobs / seconds, 1),
        "sbatch_ms_per_job": round(commands.submit_seconds / jobs * 1000, 1),
        "own_ms_per_job": round((sum(thread_seconds) - commands.submit_seconds) / jobs * 1000, 1),
        "cpu_ms_per_job": round((own_after - own_before) / jobs * 1000, 2),
        "sbatch_cpu_ms_per_job": round((children_after - children_before) / jobs * 1000, 2),
    }


def burst_sbatch(slurm: SlurmCommands, account: RunAs, jobs: int) -> dict[str, float]:
    """A loop of ``sbatch`` of ``jobs`` one-task jobs of the same shape: its rate."""
    script = "#!/bin/sh\nsrun -N1 -n1 sleep 600\n"
    own_before, children_before = cpu_seconds()
    begin = time.perf_counter()
    for index in range(jobs):
        options = [f"--nodelist=node{index % 3 + 1}", "-N1", "-n1", "--mem=16",
                   "--no-requeue", "--output=/dev/null"]  # fmt: skip
        slurm.submit(script, account.uid, account.gid, options)
    seconds = time.perf_counter() - begin
    own_after, children_after = cpu_seconds()
    return {
        "jobs_per_s": round(jobs / seconds, 1),
        "sbatch_ms_per_job": round(seconds / jobs * 1000, 1),
        "cpu_ms_per_job": round((own_after - own_before) / jobs * 1000, 2),
        "sbatch_cpu_ms_per_job": round((children_after - children_before) / jobs * 1000, 2),
    }


def burst(cluster, backend: SlurmBackend, account: RunAs, jobs: int, rounds: int) -> None:
    """Print each round's rates side by side (with the load average and which side went
    first), and Trainyard's rate over Slurm's."""
    slurm = SlurmCommands(str(cluster.conf))

    def clear() -> None:
        slurm.run("scancel", f"--user={account.name}")
        wait_until_idle(cluster, cluster.nodes)

    results = []
    for round_ in range(rounds):
        started = time.strftime("%H:%M:%S", time.gmtime())
        load = os.getloadavg()[0]
        if round_ % 2 == 0:
            trainyard = burst_trainyard(backend, account, jobs, round_)
            clear()
            plain = burst_sbatch(slurm, account, jobs)
            clear()
        else:
            plain = burst_sbatch(slurm, account, jobs)
            clear()
            trainyard = burst_trainyard(backend, account, jobs, round_)
            clear()
        ratio = round(trainyard["jobs_per_s"] / plain["jobs_per_s"], 2)
        results.append({
            "round": round_ + 1, "started_utc": started, "load_1min": round(load, 2),
            "first": "trainyard" if round_ % 2 == 0 else "sbatch",
            "trainyard": trainyard, "sbatch": plain, "ratio": ratio,
        })  # fmt: skip
        print(json.dumps(results[-1]), flush=True)
    ratios = [result["ratio"] for result in results]
    print(json.dumps({"burst": jobs, "ratios": ratios, "every_round_at_least_1": min(ratios) >= 1}))


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000, 1),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--burst", type=int, default=0, help="jobs per burst (0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per side")
    args = parser.parse_args()
    jobs = args.jobs
    account = job_account("bench")
    with running_cluster() as cluster, tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        root.chmod(0o711)
        commands = TimedCommands(str(cluster.conf))
        backend = SlurmBackend(root / "state", root / "logs", commands=commands)
        if args.burst:
            burst(cluster, backend, account, args.burst, args.rounds)
            return
        plain = owned_directory(root / "plain", account)
        slurm = SlurmCommands(str(cluster.conf))
        times: dict[str, list[float]] = {"trainyard": [], "sbatch": []}
        for index in range(jobs):
            times["trainyard"].append(trainyard_once(backend, account, index))
            wait_until_idle(cluster, ["node1", "node2"])
            times["sbatch"].append(sbatch_once(slurm, account, plain, index))
            wait_until_idle(cluster, ["node1", "node2"])
        result = {name: summary(seconds) for name, seconds in times.items()}
        ratio = result["trainyard"]["p50_ms"] / result["sbatch"]["p50_ms"]
        print(json.dumps({"jobs": jobs, **result, "ratio_p50": round(ratio, 2)}, indent=2))


if __name__ == "__main__":
    main()
