"""One attempt of a job as one Slurm batch job: the allocation that honours Trainyard's
placement exactly, and the batch script that starts every worker in it.

The allocation names each node the core chose (``--nodelist``) with exactly the GPUs,
CPUs and memory of the workers placed on it. When every node gets the same share it is
one job (``--nodes=N --ntasks-per-node``); otherwise a heterogeneous job with one
component per node, which Slurm also allocates all at once. Either way all workers start
together or none do (gang).

The allocation's time limit (``--time``) is what is left of the job's wall time, so that
Slurm ends a job whose portal is down.

The batch script runs as the job's owner on the allocation's first node and starts one
``srun`` step per worker, pinned to that worker's node, with the worker's own
environment. Each worker's step marks that it runs (``<status dir>/worker-<rank>.started``)
before it runs the command; the batch script writes each worker's exit status to
``<status dir>/worker-<rank>.exit`` as the worker ends, and its output (which srun
forwards to the batch node) to the worker's log in the log store.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from jobmanager.backends.base import JobLaunch, WorkerSpec


@dataclass(frozen=True, slots=True)
class NodeShare:
    """What one node gives the attempt: its workers, and per worker CPUs and the sums."""

    node: str
    ranks: tuple[int, ...]
    cpus_per_worker: int
    memory: int  # MiB, for all its workers
    gpus: int  # for all its workers

    def options(self) -> list[str]:
        gres = [f"--gres=gpu:{self.gpus}"] if self.gpus else []
        return [
            f"--nodelist={self.node}", "--nodes=1", f"--ntasks={len(self.ranks)}",
            f"--cpus-per-task={self.cpus_per_worker}", f"--mem={self.memory}", *gres,
        ]  # fmt: skip


def worker_cpus(spec: WorkerSpec) -> int:
    return max(1, math.ceil(spec.millicpus / 1000))


def node_shares(launch: JobLaunch) -> list[NodeShare]:
    """The nodes of the placement, in the order of their first worker (rank 0's first)."""
    by_node: dict[str, list[WorkerSpec]] = {}
    for spec in sorted(launch.workers, key=lambda spec: spec.rank):
        by_node.setdefault(spec.node, []).append(spec)
    return [
        NodeShare(
            node=node,
            ranks=tuple(spec.rank for spec in specs),
            cpus_per_worker=max(worker_cpus(spec) for spec in specs),
            memory=sum(max(1, spec.memory) for spec in specs),
            gpus=sum(len(spec.gpus) for spec in specs),
        )
        for node, specs in by_node.items()
    ]


def heterogeneous(shares: list[NodeShare]) -> bool:
    """Whether the nodes' shares differ (one component per node is needed)."""
    return len({(len(s.ranks), s.cpus_per_worker, s.memory, s.gpus) for s in shares}) > 1


def allocation_options(shares: list[NodeShare]) -> list[str]:
    """sbatch's options for the allocation: one job when every node's share is alike,
    else one component per node (``:`` between them)."""
    first = shares[0]
    if not heterogeneous(shares):
        gres = [f"--gres=gpu:{first.gpus}"] if first.gpus else []
        return [
            f"--nodelist={','.join(s.node for s in shares)}", f"--nodes={len(shares)}",
            f"--ntasks={len(shares) * len(first.ranks)}",
            f"--ntasks-per-node={len(first.ranks)}",
            f"--cpus-per-task={first.cpus_per_worker}", f"--mem={first.memory}", *gres,
        ]  # fmt: skip
    options: list[str] = []
    for index, share in enumerate(shares):
        options += ([":"] if index else []) + share.options()
    return options


def time_limit(wall_time: float | None, grace: float) -> list[str]:
    """sbatch's ``--time`` for an attempt that may run ``wall_time`` seconds: in whole
    minutes (Slurm's unit), rounded up past the wall time and the portal's stop grace, so
    that the job manager's own stop comes first while the portal is up and Slurm ends the
    job when it is not. No option without a wall time (the partition's limit holds)."""
    if wall_time is None:
        return []
    return [f"--time={max(1, math.ceil((wall_time + grace) / 60))}"]


def step_options(spec: WorkerSpec, shares: list[NodeShare]) -> list[str]:
    """srun's options for one worker: its node (or its component), its own CPUs, memory
    and GPUs, and no more (``--exact``, so that its peers on the node start beside it)."""
    index = next(i for i, share in enumerate(shares) if share.node == spec.node)
    where = [f"--het-group={index}"] if heterogeneous(shares) else [f"--nodelist={spec.node}"]
    gres = f"--gres=gpu:{len(spec.gpus)}" if spec.gpus else "--gres=none"
    return [
        *where, "--nodes=1", "--ntasks=1", "--exact", "--export=ALL", "--kill-on-bad-exit=0",
        f"--cpus-per-task={worker_cpus(spec)}", f"--mem={max(1, spec.memory)}", gres,
    ]  # fmt: skip


def batch_script(
    launch: JobLaunch,
    shares: list[NodeShare],
    envs: dict[int, dict[str, str]],
    working_dir: str,
    status_dir: str,
    log_dir: str,
    commands: dict[int, str] | None = None,
) -> str:
    """The batch script: every worker's step in the background, each one's exit status
    recorded as it ends, then wait for all of them. ``commands``: a worker's own command
    line where it is not the job's (an elastic job's, under torchrun's agent)."""
    lines = [
        "#!/bin/sh",
        f"# Trainyard job {launch.job_id}, attempt {launch.attempt}: one step per worker.",
    ]
    for spec in sorted(launch.workers, key=lambda spec: spec.rank):
        command = shlex.quote((commands or {}).get(spec.rank, launch.command))
        exports = " ".join(
            f"{name}={shlex.quote(value)}" for name, value in envs[spec.rank].items()
        )
        status = shlex.quote(f"{status_dir}/worker-{spec.rank}.exit")
        started = shlex.quote(f"{status_dir}/worker-{spec.rank}.started")
        log = shlex.quote(f"{log_dir}/worker-{spec.rank}.log")
        srun = " ".join(["srun", *step_options(spec, shares)])
        step = shlex.quote(f": > {started}; exec /bin/sh -c {command}")
        lines.append(
            f"(export {exports}; cd {shlex.quote(working_dir)} || exit 1; "
            f"{srun} /bin/sh -c {step} >> {log} 2>&1 < /dev/null; "
            f"echo $? > {status}.tmp && mv {status}.tmp {status}) &"
        )
    lines.append("wait")
    return "\n".join(lines) + "\n"
