"""Slurm's own commands, read through their ``--json`` output (``squeue``, ``sinfo``) and
``sbatch --parsable``: what the Slurm backend asks of the controller, typed. The tree
topology has no JSON form: ``scontrol show topology`` answers one ``Key=Value`` record a
line, and ``scontrol show hostnames`` expands its node lists, one name a line.

The commands find the controller and authenticate to it as every Slurm client does: the
``slurm.conf`` named by ``SLURM_CONF`` (its ``SlurmctldHost``, and munge's socket in
``AuthInfo``). Nothing here parses output written for people.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from typing import Any

COMMAND_TIMEOUT_SECONDS = 30.0
# A node in any of these states is down: what runs there is lost (sinfo --json: the base
# state upper-cased, then its flags). One drained takes no new work; what runs there goes on.
DOWN_STATES = frozenset({"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "INVALID_REG"})
DRAINED_STATES = frozenset(
    {"DRAIN", "DRAINING", "DRAINED", "MAINTENANCE", "REBOOT_REQUESTED", "RESERVED"}
)
ENDED_JOB_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)  # fmt: skip


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is its own."""


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    address: str
    cpus: int
    memory: int  # MiB
    gres: str  # e.g. "gpu:a100:4"
    states: frozenset[str]  # the base state and its flags, upper-case
    reason: str

    @property
    def down(self) -> bool:
        return bool(self.states & DOWN_STATES)

    @property
    def drained(self) -> bool:
        return bool(self.states & DRAINED_STATES)

    @property
    def gpus(self) -> tuple[str, int]:
        """The GPU type and count its GRES declare ("" and 0 without GPUs)."""
        for entry in self.gres.split(","):
            parts = entry.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) >= 2:
                count = parts[-1]
                gpu_type = parts[1] if len(parts) == 3 else "gpu"
                return gpu_type, int(count) if count.isdigit() else 0
        return "", 0

    def why_down(self) -> str:
        states = ", ".join(sorted(s.lower() for s in self.states & DOWN_STATES))
        return f"Slurm: {states}" + (f" ({self.reason})" if self.reason else "")


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: int  # the heterogeneous job's leader's for every component
    name: str
    state: str  # e.g. "RUNNING", "NODE_FAIL"
    reason: str
    nodes: str

    @property
    def ended(self) -> bool:
        return self.state in ENDED_JOB_STATES

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING", "REQUEUED", "SUSPENDED")


class SlurmCommands:
    """Runs Slurm's client commands against the cluster ``conf`` names."""

    def __init__(self, conf: str = "") -> None:
        self.conf = conf

    def _env(self) -> dict[str, str]:
        # Nothing of the portal's environment reaches a job through sbatch (it exports the
        # submitting environment by default): the batch script sets all a worker gets.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        return env | ({"SLURM_CONF": self.conf} if self.conf else {})

    def run(self, *args: str, stdin: str | None = None) -> str:
        try:
            result = subprocess.run(
                args, input=stdin, env=self._env(), capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT_SECONDS,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as error:
            raise SlurmError(f"{args[0]}: {error}") from error
        if result.returncode != 0:
            raise SlurmError(f"{args[0]}: {result.stderr.strip() or result.returncode}")
        return result.stdout

    def _json(self, *args: str) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self.run(*args, "--json"))
        if answer.get("errors"):
            raise SlurmError(f"{args[0]}: {answer['errors']}")
        return answer

    def submit(self, script: str, uid: int, gid: int, options: list[str]) -> int:
        """Submit a batch script (read from stdin) as the account ``uid`` with its group
        ``gid`` (without ``--gid`` Slurm keeps the submitter's: root's); the new job's id."""
        out = self.run(
            "sbatch", "--parsable", f"--uid={uid}", f"--gid={gid}", *options, stdin=script
        )
        return int(out.strip().split(";")[0])

    def jobs(self) -> list[SlurmJob]:
        """Every job the controller holds, ended ones until ``MinJobAge`` passes."""
        components: dict[int, list[dict[str, Any]]] = {}
        for job in self._json("squeue")["jobs"]:
            components.setdefault(job.get("het_job_id") or job["job_id"], []).append(job)
        jobs = []
        for leader_id, parts in components.items():
            # a heterogeneous job's components start and end together: its leader speaks
            leader = next((part for part in parts if part["job_id"] == leader_id), parts[0])
            nodes = ",".join(part["nodes"] for part in parts if part.get("nodes"))
            jobs.append(
                SlurmJob(leader_id, leader["name"], leader["job_state"],
                         leader.get("state_reason", ""), nodes)
            )  # fmt: skip
        return jobs

    def nodes(self) -> list[SlurmNode]:
        return [
            SlurmNode(
                name=node["name"],
                address=node.get("address") or node["name"],
                cpus=int(node.get("cpus", 0)),
                memory=int(node.get("real_memory", 0)),
                gres=node.get("gres", ""),
                states=frozenset([node["state"].upper(), *node.get("state_flags", [])]),
                reason=node.get("reason", ""),
            )
            for node in self._json("sinfo")["nodes"]
        ]

    def leaf_switches(self) -> dict[str, str]:
        """Each node's leaf switch in Slurm's tree topology; {} where none is configured
        (or the command is refused)."""
        try:
            records = leaf_switch_records(self.run("scontrol", "show", "topology"))
            return {
                node: switch
                for switch, expression in records.items()
                for node in self.run("scontrol", "show", "hostnames", expression).split()
            }
        except SlurmError:
            return {}

    def signal(self, job_id: int, signal_name: str, batch_too: bool = False) -> None:
        """Send a signal to the job's steps (and its batch script with ``batch_too``)."""
        full = ["--full"] if batch_too else []
        self.run("scancel", f"--signal={signal_name}", *full, str(job_id))

    def cancel(self, job_id: int) -> None:
        self.run("scancel", str(job_id))

    def set_drained(self, node: str, drained: bool, reason: str) -> None:
        state = ["state=drain", f"reason={reason}"] if drained else ["state=resume"]
        self.run("scontrol", "update", f"nodename={node}", *state)


def leaf_switch_records(text: str) -> dict[str, str]:
    """Leaf switches (level 0) of ``scontrol show topology`` and the node list of each."""
    leaves: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if fields.get("Level") == "0" and fields.get("SwitchName") and fields.get("Nodes"):
            leaves[fields["SwitchName"]] = fields["Nodes"]
    return leaves
