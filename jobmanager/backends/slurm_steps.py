"""Steps started from outside into a running worker of a Slurm job: the gateway's
sessions, commands, SFTP servers and port relays.

Each is an ``srun --jobid=<job> --overlap`` step on the worker's node (its component of a
heterogeneous job), run as the job's owner (``setpriv`` drops root before ``srun``
starts: Slurm then runs the step as that account, in the job's allocation, on the node,
with the worker's environment and working directory). ``--overlap`` shares the
allocation's CPUs, memory and GPUs with the worker's own step, so a session never waits
for resources the worker holds. Slurm ends every step of a job as the job ends: a session
does not outlive it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

from jobmanager.backends.base import RunAs

# Where setpriv and srun are found (never on the job's PATH, which is the tenant's).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Variables of the job's environment srun does not get: the loader's and the C library's
# (those glibc drops for a setuid program) would run the tenant's code in srun on the
# gateway's host, Slurm's would steer srun itself.
NOT_FOR_SRUN_PREFIXES = ("LD_", "SLURM_")
NOT_FOR_SRUN = frozenset(
    {"GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE",
     "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"}
)  # fmt: skip


def _system(command: str) -> str:
    return shutil.which(command, path=SYSTEM_PATH) or command


@dataclass(frozen=True)
class WorkerStep:
    """Where a running worker is: its Slurm job, node (and component of a heterogeneous
    job), its owner, environment and working directory."""

    job_id: str
    rank: int
    slurm_id: int
    node: str
    het_group: int | None
    owner: RunAs
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    working_dir: str = ""

    def argv(self, command: list[str], pty: bool = False) -> list[str]:
        """``command`` as a step of the worker's job on its node, run as its owner; on a
        terminal (``srun --pty``, which must then have one as its stdin) or on pipes."""
        where = [f"--het-group={self.het_group}"] if self.het_group is not None else []
        chdir = [f"--chdir={self.working_dir}"] if self.working_dir else []
        return [
            _system("setpriv"), f"--reuid={self.owner.uid}", f"--regid={self.owner.gid}",
            "--init-groups", "--no-new-privs", "--",
            _system("srun"), "-QQ", f"--jobid={self.slurm_id}", "--overlap", *where,
            f"--nodelist={self.node}", "--nodes=1", "--ntasks=1", "--export=ALL",
            "--unbuffered", *chdir, *(["--pty"] if pty else []), "--", *command,
        ]  # fmt: skip

    def environment(self, conf: str, session_env: dict[str, str]) -> dict[str, str]:
        """srun's environment, which ``--export=ALL`` hands to the step: the worker's
        (less ``NOT_FOR_SRUN``), the session's over it, and where the cluster's
        configuration is."""
        env = {"PATH": SYSTEM_PATH} | self.env | session_env
        env = {
            name: value
            for name, value in env.items()
            if not name.startswith(NOT_FOR_SRUN_PREFIXES) and name not in NOT_FOR_SRUN
        }
        return env | ({"SLURM_CONF": conf} if conf else {})
