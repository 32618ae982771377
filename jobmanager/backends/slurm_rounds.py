"""How the Slurm backend resizes a running elastic job: a new allocation of the new size.

Every worker of an elastic job runs under torchrun's elastic agent
(:mod:`jobmanager.backends.elastic`), and a resize restarts every worker into a new
rendezvous round of the new size, as the local and Kubernetes backends do. On Slurm a
round is one batch job (one allocation, ``ty-<job>-a<attempt>r<round>``): the resize
submits the new round's allocation, exactly the nodes and GPUs the core placed, held by
``--dependency=afterany:<previous>``, and asks the previous round's to stop (SIGTERM to
its steps, a kill once the grace has passed, as a stop does). Slurm starts the new round
only once the previous allocation has ended and given its GPUs back; meanwhile its
workers are reported pending, never failed.

Why not ``scontrol update`` of the running job's node list: Slurm can only shrink a
running allocation that way (``NumNodes=``/``NodeList=``, whole nodes, no change to its
GRES: a node keeping one of its two workers cannot give one GPU back), and growing one
takes a second job merged into it (one submitted with ``--dependency=expand:<job>``,
given up with ``scontrol update JobId=<new> NumNodes=0``, then ``NumNodes=ALL`` on the
first, whose batch script must source the new environment), which does not work for
heterogeneous jobs and leaves the batch script to start steps on nodes it did not know.
Since every worker restarts into a new round anyway, the new allocation loses nothing
and keeps one path: a round is deployed exactly as an attempt is.

What a round holds is kept in the job's ``state.json``: ``round``, the allocations being
retired (their Slurm ids, when their stop was asked, whether they were signalled and
killed), and the new round's submission (script and options) until Slurm has it, so that
another instance finishes a resize cut short between the two.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from jobmanager.backends.slurm_commands import SlurmCommands, SlurmError, SlurmJob


def slurm_name(job_id: str, attempt: int, round_number: int = 0) -> str:
    """The Slurm job name of an attempt's round (its first round: the attempt's name)."""
    suffix = f"r{round_number}" if round_number else ""
    return f"ty-{job_id}-a{attempt}{suffix}"


def status_dir_name(attempt: int, round_number: int = 0) -> str:
    """The directory of a round's status files and batch log, under the job's."""
    return f"a{attempt}" + (f"r{round_number}" if round_number else "")


def retire(state: dict[str, Any], grace_seconds: float) -> None:
    """Record the state's allocation as one to stop (asked now, with the grace)."""
    if state["slurm_id"] is None:
        return
    state.setdefault("retiring", []).append(
        {
            "slurm_id": state["slurm_id"],
            "stop_requested_at": time.time(),
            "grace_seconds": max(0.0, float(grace_seconds)),
            "signalled": False,
            "killed_at": None,
        }
    )


def dependency(state: dict[str, Any], jobs: dict[int, SlurmJob]) -> list[str]:
    """sbatch's option that holds a round until every retiring allocation Slurm still
    runs has ended (none when all have)."""
    running = [
        str(entry["slurm_id"])
        for entry in state.get("retiring", [])
        if (job := jobs.get(entry["slurm_id"])) is not None and not job.ended
    ]
    return [f"--dependency=afterany:{':'.join(running)}"] if running else []


def settle_retiring(slurm: SlurmCommands, state: dict[str, Any], jobs: dict[int, SlurmJob]) -> bool:
    """Move the retiring allocations on: SIGTERM to one not yet signalled (a cancel when
    it never started), a kill once its grace has passed, forgotten once Slurm has ended
    it. Whether the state changed."""
    kept, changed = [], False
    now = time.time()
    for entry in state.get("retiring", []):
        job = jobs.get(entry["slurm_id"])
        if job is None or job.ended:
            changed = True
            continue
        kept.append(entry)
        with contextlib.suppress(SlurmError):  # it ended meanwhile
            if job.pending:
                slurm.cancel(entry["slurm_id"])
                entry["signalled"] = changed = True
            elif not entry["signalled"]:
                slurm.signal(entry["slurm_id"], "TERM")
                entry["signalled"] = changed = True
            due = entry["stop_requested_at"] + entry["grace_seconds"]
            if entry["killed_at"] is None and now >= due:
                slurm.signal(entry["slurm_id"], "KILL", batch_too=True)
                entry["killed_at"] = now
                changed = True
    state["retiring"] = kept
    return changed
