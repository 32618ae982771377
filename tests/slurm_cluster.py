"""A real multi-node Slurm cluster on this one machine, for tests and for a person to try.

munged and slurmctld run on the host; each node's slurmd runs in a network namespace of
its own, with one veth into a bridge this module creates (10.77.<random>.0/24, the
controller at .1, the nodes at .11, .12, ...), no default route, and a hosts and
resolv.conf of its own bind-mounted in a private mount namespace (without them every
lookup from a node would try the host's resolver: 10 s each, and traffic off the machine).
Each node has 4 fake GPUs (character devices, ``c 195 N``) declared as GRES. Names and
ports are random, so clusters of tests running side by side cannot collide; ``down``
kills every daemon and every process left in the namespaces, and removes the namespaces,
the bridge and the directory, also after a failure.

    python -m tests.slurm_cluster up [DIR]     # prints the SLURM_CONF to export
    python -m tests.slurm_cluster down DIR
(``deploy/slurm-cluster.sh`` wraps both.)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jobmanager.backends.slurm_commands import SlurmCommands, SlurmError
from tests.polling import wait_until

NODE_COUNT = 3
GPUS_PER_NODE = 4
# Not a name the tests' world already has in any case: MariaDB compares GPU types' names
# without case, so "a100" would be the world's A100 there (and its quota a duplicate).
GPU_TYPE = "h100"
CPUS_PER_NODE = 4
MEMORY_MIB = 8192
NVIDIA_MAJOR = 195
READY_SECONDS = 60.0
STATE_FILE = "cluster.json"


@dataclass
class SlurmCluster:
    """What ``up`` made, written to ``<dir>/cluster.json`` so that ``down`` finds it."""

    directory: str
    tag: str  # random, in every name this cluster gives the host
    subnet: str  # "10.77.N"
    controller_port: int
    node_port: int
    nodes: list[str] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return Path(self.directory) / "etc" / "slurm.conf"

    @property
    def bridge(self) -> str:
        return f"tys{self.tag}"

    @property
    def controller_address(self) -> str:
        return f"{self.subnet}.1"

    def namespace(self, node: str) -> str:
        return f"tys{self.tag}-{node}"

    def node_address(self, node: str) -> str:
        return f"{self.subnet}.{10 + self.nodes.index(node) + 1}"

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm command run on the host needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (scontrol, sinfo...) against this cluster."""
        return subprocess.run(
            args, env=os.environ | self.env, capture_output=True, text=True, timeout=30
        )

    def kill_node(self, node: str) -> None:
        """Kill the node's slurmd outright, as a machine that dies would stop answering."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pids[f"slurmd-{node}"], signal.SIGKILL)

    def start_node(self, node: str) -> None:
        """(Re)start the node's slurmd."""
        self.pids[f"slurmd-{node}"] = _start_slurmd(self, node)
        self.save()

    def save(self) -> None:
        (Path(self.directory) / STATE_FILE).write_text(json.dumps(asdict(self)))


def up(directory: Path | None = None, node_count: int = NODE_COUNT) -> SlurmCluster:
    """Start the cluster and wait until every node is idle; undone if anything fails."""
    directory = Path(directory or tempfile.mkdtemp(prefix="ty-slurm-"))
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # jobs run as their owners read the configuration
    cluster = SlurmCluster(
        directory=str(directory),
        tag=secrets.token_hex(3),
        subnet=f"10.77.{_free_octet()}",
        controller_port=_free_port(),
        node_port=_free_port(),
        nodes=[f"node{index}" for index in range(1, node_count + 1)],
    )
    cluster.save()
    try:
        _write_files(cluster)
        _make_network(cluster)
        cluster.pids["munged"] = _start_munged(cluster)
        cluster.pids["slurmctld"] = _start_slurmctld(cluster)
        for node in cluster.nodes:
            cluster.pids[f"slurmd-{node}"] = _start_slurmd(cluster, node)
        cluster.save()
        wait_until_idle(cluster, cluster.nodes)
    except BaseException:
        down(cluster)
        raise
    return cluster


def wait_until_idle(
    cluster: SlurmCluster, nodes: list[str], seconds: float = READY_SECONDS
) -> None:
    """Wait until each of ``nodes`` is idle (registered, responding, running nothing)."""
    deadline = time.monotonic() + seconds
    states: dict[str, frozenset[str]] = {}
    while time.monotonic() < deadline:
        states = node_states(cluster)
        if all(states.get(node) == {"IDLE"} for node in nodes):
            return
        time.sleep(0.2)
    raise TimeoutError(f"Slurm nodes not idle after {seconds:.0f} s: {states}; {_logs(cluster)}")


def node_states(cluster: SlurmCluster) -> dict[str, frozenset[str]]:
    """Each node's state and flags as slurmctld sees them (``sinfo --json``)."""
    try:
        return {node.name: node.states for node in SlurmCommands(str(cluster.conf)).nodes()}
    except SlurmError:
        return {}


def down(cluster: SlurmCluster | Path | str) -> None:
    """Stop and remove everything the cluster made; what is already gone is skipped."""
    if not isinstance(cluster, SlurmCluster):
        state = Path(cluster) / STATE_FILE
        if not state.exists():
            return
        cluster = SlurmCluster(**json.loads(state.read_text()))
    for name, pid in cluster.pids.items():
        if name.startswith("slurmd") or name == "slurmctld":
            _kill(pid)
    for node in cluster.nodes:  # the jobs' processes left in a node's namespace
        namespace = cluster.namespace(node)
        for stray in _run(["ip", "netns", "pids", namespace], check=False).stdout.split():
            _kill(int(stray))
        _run(["ip", "netns", "delete", namespace], check=False)
    _kill(cluster.pids.get("munged", 0))
    _run(["ip", "link", "delete", cluster.bridge], check=False)
    shutil.rmtree(cluster.directory, ignore_errors=True)


@contextlib.contextmanager
def running_cluster(node_count: int = NODE_COUNT) -> Iterator[SlurmCluster]:
    cluster = up(node_count=node_count)
    try:
        yield cluster
    finally:
        down(cluster)


# --- making it ----------------------------------------------------------------------------


def _write_files(cluster: SlurmCluster) -> None:
    root = Path(cluster.directory)
    for sub in ("etc", "log", "ctld", "munge", "dev", *cluster.nodes):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o711)
    (root / "log").chmod(0o755)
    for index in range(GPUS_PER_NODE):
        os.mknod(root / "dev" / f"nvidia{index}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, index))
    hosts = ["127.0.0.1 localhost", f"{cluster.controller_address} ctlhost"]
    hosts += [f"{cluster.node_address(node)} {node}" for node in cluster.nodes]
    (root / "etc" / "hosts").write_text("\n".join(hosts) + "\n")
    (root / "etc" / "resolv.conf").write_text(
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
    )
    (root / "etc" / "jwt.key").write_bytes(secrets.token_bytes(32))
    (root / "etc" / "jwt.key").chmod(0o600)
    srun_ports = random.randrange(20000, 30000, 100)
    node_list = ",".join(cluster.nodes)
    nodes = "\n".join(
        f"NodeName={node} NodeAddr={cluster.node_address(node)} CPUs={CPUS_PER_NODE} "
        f"RealMemory={MEMORY_MIB} Gres=gpu:{GPU_TYPE}:{GPUS_PER_NODE} State=UNKNOWN"
        for node in cluster.nodes
    )
    (root / "etc" / "slurm.conf").write_text(f"""\
ClusterName=ty{cluster.tag}
SlurmctldHost=ctlhost({cluster.controller_address})
SlurmctldPort={cluster.controller_port}
SlurmdPort={cluster.node_port}
SrunPortRange={srun_ports}-{srun_ports + 99}
CommunicationParameters=NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={root}/etc/jwt.key
StateSaveLocation={root}/ctld
SlurmctldPidFile={root}/ctld/slurmctld.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdSpoolDir={root}/%n
SlurmdPidFile={root}/%n/slurmd.pid
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
MpiDefault=none
MailProg=/bin/true
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=5
MinJobAge=600
TopologyPlugin=topology/tree
{nodes}
PartitionName=main Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
""")
    (root / "etc" / "gres.conf").write_text(
        f"NodeName={node_list} Name=gpu Type={GPU_TYPE} "
        f"File={root}/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n"
    )
    # Two leaf switches under one spine: the first two nodes under s0, the rest under s1.
    leaves = {"s0": cluster.nodes[:2], "s1": cluster.nodes[2:]}
    (root / "etc" / "topology.conf").write_text(
        "".join(
            f"SwitchName={switch} Nodes={','.join(nodes)}\n"
            for switch, nodes in leaves.items()
            if nodes
        )
        + f"SwitchName=spine Switches={','.join(s for s, nodes in leaves.items() if nodes)}\n"
    )
    for name in ("slurm.conf", "gres.conf", "hosts", "resolv.conf", "topology.conf"):
        (root / "etc" / name).chmod(0o644)
    (root / "etc").chmod(0o755)


def _make_network(cluster: SlurmCluster) -> None:
    _run(["ip", "link", "add", cluster.bridge, "type", "bridge"])
    _run(["ip", "addr", "add", f"{cluster.controller_address}/24", "dev", cluster.bridge])
    _run(["ip", "link", "set", cluster.bridge, "up"])
    for index, node in enumerate(cluster.nodes, start=1):
        namespace, veth = cluster.namespace(node), f"tys{cluster.tag}v{index}"
        _run(["ip", "netns", "add", namespace])
        _run(
            ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace]
        )
        _run(["ip", "link", "set", veth, "master", cluster.bridge, "up"])
        inside = ["ip", "-n", namespace]
        _run([*inside, "addr", "add", f"{cluster.node_address(node)}/24", "dev", "eth0"])
        _run([*inside, "link", "set", "eth0", "up"])
        _run([*inside, "link", "set", "lo", "up"])  # and no default route: nothing leaves


def _start_munged(cluster: SlurmCluster) -> int:
    munge = Path(cluster.directory) / "munge"
    _run(["mungekey", "--create", f"--keyfile={munge}/munge.key"])
    process = _daemon(
        ["munged", "--foreground", "--force", f"--key-file={munge}/munge.key",
         f"--socket={munge}/munge.sock", f"--pid-file={munge}/munged.pid",
         f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"],
        munge / "munged.out",
    )  # fmt: skip
    _wait_for(lambda: (munge / "munge.sock").exists(), "munged's socket", cluster)
    return process


def _start_slurmctld(cluster: SlurmCluster) -> int:
    """slurmctld believes it is ``ctlhost`` (its own UTS and mount namespace: the
    hostname and /etc/hosts it checks itself against), on the host's network."""
    etc = Path(cluster.directory) / "etc"
    script = f"mount --bind {etc}/hosts /etc/hosts && hostname ctlhost && exec slurmctld -D -i"
    return _daemon(
        ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script],
        Path(cluster.directory) / "log" / "slurmctld.out",
        env=cluster.env,
    )


def _start_slurmd(cluster: SlurmCluster, node: str) -> int:
    """slurmd in the node's network namespace, with its own hostname, hosts and
    resolv.conf (``nsenter``, not ``ip netns exec``: that remounts /sys)."""
    etc = Path(cluster.directory) / "etc"
    script = (
        f"mount --bind {etc}/hosts /etc/hosts && mount --bind {etc}/resolv.conf "
        f"/etc/resolv.conf && hostname {node} && exec slurmd -D -N {node}"
    )
    return _daemon(
        ["nsenter", f"--net=/run/netns/{cluster.namespace(node)}", "unshare", "--uts",
         "--mount", "--propagation", "private", "sh", "-c", script],
        Path(cluster.directory) / "log" / f"slurmd-{node}.out",
        env=cluster.env,
    )  # fmt: skip


def _daemon(args: list[str], output: Path, env: dict[str, str] | None = None) -> int:
    with open(output, "ab") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=os.environ | (env or {}), start_new_session=True,
        )  # fmt: skip
    return process.pid


def _wait_for(condition, what: str, cluster: SlurmCluster, seconds: float = 15.0) -> None:
    try:
        wait_until(condition, seconds, what)
    except AssertionError as error:
        raise TimeoutError(f"{error}; {_logs(cluster)}") from None


def _kill(pid: int) -> None:
    """Kill a daemon we started (its whole session) and reap it if it is our child."""
    if pid <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _free_octet() -> int:
    """A third octet of 10.77.0.0/16 that no address of this host uses yet."""
    used = _run(["ip", "-4", "-o", "addr"], check=False).stdout
    for _ in range(100):
        octet = random.randint(1, 254)
        if f" 10.77.{octet}." not in used:
            return octet
    raise RuntimeError("Every 10.77.N.0/24 is in use on this host.")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return probe.getsockname()[1]


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


def _logs(cluster: SlurmCluster) -> str:
    return f"see {Path(cluster.directory) / 'log'}"


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "up":
        cluster = up(Path(argv[1]) if len(argv) > 1 else None)
        print(
            f"export SLURM_CONF={cluster.conf}  # then: deploy/slurm-cluster.sh down "
            f"{cluster.directory}"
        )
        return 0
    if len(argv) == 2 and argv[0] == "down":
        down(Path(argv[1]))
        return 0
    print("usage: python -m tests.slurm_cluster up [DIR] | down DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
