"""How an elastic job's workers run: each under PyTorch's elastic agent.

Each worker runs ``torchrun --nnodes=MIN:MAX --nproc-per-node=1`` with the c10d
rendezvous on rank 0's address, and the job's command as the one process its agent
starts (``--no-python /bin/sh -c COMMAND``), which resumes from its checkpoint at the
world size torchrun gives it. Rank 0's agent hosts the rendezvous store (``is_host``,
not guessed from addresses, which every worker of a job sharing one network namespace
would match).

A resize restarts every worker into a new rendezvous round of the new size (its own
``--rdzv-id``, a new store on rank 0): torchrun's in-place membership change (late
agents joining a running group, which the others restart for) did not complete a round
with torch 2.13 here, on the host as in containers (pytorch/pytorch#123678 reports the
same), so the store need not outlive worker 0: each round has its own. This is the
restart from the last checkpoint that the scheduler counts as a resize.
"""

from __future__ import annotations

import shlex

from jobmanager.backends.base import JobLaunch

# Restarts an agent may make in one attempt: one per membership change (and per failure).
MAX_RESTARTS = 1000
# How long a rendezvous waits for more workers once min_workers have joined.
LAST_CALL_SECONDS = 2


def rendezvous_endpoint(master_addr: str, port: int) -> str:
    return f"{master_addr}:{port}"


def elastic_command(
    launch: JobLaunch, rank: int, endpoint: str, address: str, round_id: str
) -> str:
    """The worker's command line: the job's command under torchrun's elastic agent, in
    rendezvous ``round_id``; the agent gives ``address`` (the worker's, not its host name,
    which nothing resolves) as its own to the others."""
    is_host = 1 if rank == 0 else 0
    argv = [
        "torchrun",
        f"--nnodes={launch.min_workers}:{launch.max_workers}",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={round_id}",
        f"--rdzv-conf=is_host={is_host},last_call_timeout={LAST_CALL_SECONDS}",
        f"--max-restarts={MAX_RESTARTS}",
        f"--local-addr={address}",
        "--no-python",
        "/bin/sh",
        "-c",
        launch.command,
    ]
    return "exec " + shlex.join(argv)


def elastic_env(launch: JobLaunch, endpoint: str) -> dict[str, str]:
    """What an elastic worker is told besides torchrun's own variables."""
    return {
        "TRAINYARD_MIN_WORKERS": str(launch.min_workers),
        "TRAINYARD_MAX_WORKERS": str(launch.max_workers),
        "TRAINYARD_RDZV_ENDPOINT": endpoint,
    }
