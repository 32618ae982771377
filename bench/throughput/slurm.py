"""The benchmark's peer: a one-host Slurm (Debian ``slurm-wlm``) with 32 GPU slots.

One slurmctld and one slurmd, with a munged of their own (own key and socket), all under
one directory; the 32 GPUs are GRES on dummy character devices made with ``mknod`` (Slurm
only checks that the files exist). ``batch_sched_delay=0`` as in Slurm's high-throughput
guide. Needs root (munged's key, the devices, slurmd).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

GPUS = 32
SLURM_CONF = """\
ClusterName=trainyardbench
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0{scheduler_extra}
MaxJobCount=100000
MaxArraySize=100001
MinJobAge=300
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
NodeName={host} CPUs={gpus} Gres=gpu:{gpus} RealMemory=16000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmPeer:
    """Start with ``start()``, stop with ``stop()``; run clients with ``env``."""

    def __init__(self, root: Path, ctld_port: int, slurmd_port: int) -> None:
        self.root = root
        self.ctld_port = ctld_port
        self.slurmd_port = slurmd_port
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.munge_socket = root / "munge" / "munge.sock"
        self.processes: list[subprocess.Popen] = []
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def start(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        for sub in ("state", "spool", "dev", "munge"):
            (self.root / sub).mkdir(parents=True)
        self.root.chmod(0o755)
        munge_dir = self.root / "munge"
        munge_dir.chmod(0o700)
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(
            ["munged", f"--socket={self.munge_socket}", f"--key-file={key}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'seed'}",
             f"--log-file={munge_dir / 'munged.log'}", "--force"],
            check=True,
        )  # fmt: skip
        for index in range(GPUS):
            device = self.root / "dev" / f"gpu{index}"
            os.mknod(device, 0o666 | 0o020000, os.makedev(195, index))
        (self.root / "gres.conf").write_text(f"Name=gpu File={self.root}/dev/gpu[0-{GPUS - 1}]\n")
        self.conf.write_text(
            SLURM_CONF.format(
                host=self.host, ctld_port=self.ctld_port, slurmd_port=self.slurmd_port,
                munge_socket=self.munge_socket, root=self.root, gpus=GPUS, scheduler_extra="",
            )
        )  # fmt: skip
        for command in (["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            self.processes.append(
                subprocess.Popen(
                    command, env=self.env, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True,
                )
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True
            ).stdout.strip()
            if out in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm did not come up; see {self.root}/slurmctld.log")

    def run(self, *command: str) -> str:
        return subprocess.run(
            list(command), env=self.env, capture_output=True, text=True, check=True
        ).stdout

    def active_jobs(self) -> int:
        """Jobs (array tasks counted one by one) not yet completed."""
        out = self.run("squeue", "-h", "-r", "-o", "%i")
        return len(out.split())

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        pid_file = self.root / "munge" / "munged.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
