"""The local backend: every worker of a job runs as a real process group on this host.

Each worker runs ``/bin/sh -c <command>`` under its own init process (``local_init``),
which forwards SIGTERM and SIGINT to the command's process group, reaps orphans, kills
what the command leaves behind and records the exit code in a status file. The init is
detached from whoever started it, so a worker outlives the Celery worker or web process
that deployed it.

Everything the backend knows lives on disk under its state directory (one
``<job id>/state.json`` per job: the attempt, each worker's init pid and start time, when
a stop was asked and its grace period), so a new instance in another process adopts the
jobs that are running. A worker whose init is gone without a status file died while
nobody watched: it is reported failed with no exit code, and the job manager's retry
rules decide what follows.

Deployment is crash-safe: each worker is recorded before it is started, and its init
waits on a pipe until its pid is recorded too, so nothing runs that the state does not
name (an init whose deployer died first exits, having run nothing). A deployment holds
the state directory's lock throughout; one found incomplete by whoever takes the lock
next was cut short by a crash, and is undone (everything of it killed, its state
removed): the job manager then deploys the job again, or finishes stopping it.

Tenants are kept apart by the kernel. Run as root, the backend runs every process of a
job as its owner's Unix account (``launch.run_as``) and never as root: each worker's init
stays root, out of the job's reach, and confines the command's process as
``confine.enter`` does (cgroup or rlimits, the owner's uid, gid and groups,
``no_new_privs``, the working directory entered as the owner). What a job may write is
its own: its working directory (``<state>/<job>/work``) and its logs
(``<logs>/<job>/``) belong to the owner, mode 0700; the backend's bookkeeping
(``<state>/<job>/``: state, status and confinement files, which name the pids and
cgroups root acts on) is root's, where the job can read and change nothing. The
confinement of every worker is recorded in the state, so that a session into the job
(SSH) can join it. Not run as root, the backend cannot switch users: every job runs as
the backend's own account (single-user mode), confined otherwise the same way.

With a sandbox (``sandbox="runc"``, or the default "auto" where the host can run it), each
worker runs in a runc container instead (``sandbox.py``: its own pid, mount, ipc and uts
namespaces, only the job's paths, cgroup limits), every worker of a job in the job's
network namespace on a host bridge (``sandbox_net.py``); the init runs the container and
deletes it, and removing a job deletes its containers and namespace.
A job that names an ``image`` runs in it (``images.py``: the site's image store, unpacked
once per digest, the container's root an overlay of it); one that names none sees the
host's system, read-only.

The nodes are this host's GPUs, found with NVML, or an inventory declared for a machine
without them (several nodes of 8 GPUs, say), so that scheduling, packing and preemption
work end to end on a laptop; a declared inventory may be a function, read at every call,
so that it follows the nodes registered while the system runs. CPU and memory limits are
cgroup v2 where the host allows it, else a memory rlimit per process; real GPUs' device
files are their worker's owner's alone while it runs (all three in ``local_host``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import psutil

from jobmanager.backends import process_identity, runc, sandbox_net
from jobmanager.backends.base import (
    BackendNode,
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    JobReport,
    LaunchRefused,
    RunAs,
    WorkerReport,
    WorkerSpec,
    WorkerState,
)
from jobmanager.backends.confine import Confinement, open_log
from jobmanager.backends.elastic import elastic_command, elastic_env, rendezvous_endpoint
from jobmanager.backends.host_accounts import can_switch_users, own_run_as
from jobmanager.backends.images import (
    DEFAULT_CACHE_KEEP,
    ImageMissing,
    ImageRoot,
    driver_files,
    environment,
    image_store,
    release_roots,
    with_driver_paths,
)
from jobmanager.backends.live_jobs import LiveJobs
from jobmanager.backends.local_host import (
    DEFAULT_CGROUP_ROOT,
    DEFAULT_DEVICE_DIR,
    MIB,
    Cgroups,
    GpuDevices,
    discover_gpus,
    gpu_type_of,
    host_resources,
    parse_declared_nodes,
)
from jobmanager.backends.local_removal import Reaper
from jobmanager.backends.local_spawner import SpawnError, spawn
from jobmanager.backends.sandbox import (
    DEFAULT_PIDS_LIMIT,
    Sandbox,
    Worker,
    available,
    container_name,
    for_backend,
    gpu_device_paths,
    reference,
    remove_containers,
    write_bundle,
)
from jobmanager.backends.sandbox_net import (
    BridgeNetwork,
    JobNetwork,
    NetworkError,
)
from jobmanager.faults import crash_point

logger = logging.getLogger(__name__)

INIT_SCRIPT = Path(__file__).with_name("local_init.py")
SPAWNER_SCRIPT = Path(__file__).with_name("local_spawner.py")
# What a worker takes from the host's environment; the rest (database URLs, secrets) stays.
INHERITED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
# A job's PATH: the system's directories, never the portal's own (root's private tool
# directories would turn "command not found" into "Permission denied"); the backend may
# put directories before them (the training environment's), the job's own environment may
# give another.
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The init's own environment: nothing of the job's (LD_PRELOAD, PYTHONPATH...) reaches a
# process that is still root; the job's environment is in its confinement file.
INIT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
TRAVERSABLE = 0o711  # other accounts pass through to their own directories, list nothing
PRIVATE = 0o700
WORKER_MARKER = "TRAINYARD_LOCAL_WORKER"  # <job id>/<attempt>/<rank>, to find strays
START_TIMEOUT_SECONDS = 10.0
KILL_WAIT_SECONDS = 3.0
CONTAINER_START_POLL_SECONDS = 0.05  # a session waiting for its worker's container
STRAY_ROUNDS = 5  # looks for a removed job's processes forked while it was being killed
LOCK_STRIPES = 64  # jobs' locks: as many deployments at once, few files


# --- the backend --------------------------------------------------------------------------


class LocalBackend(ClusterBackend):
    name = "local"
    resizes = True

    def __init__(
        self,
        state_dir: Path | str,
        log_dir: Path | str,
        nodes: str | Sequence[BackendNode] | Callable[[], Sequence[BackendNode]] | None = None,
        cgroup_root: Path | str | None = DEFAULT_CGROUP_ROOT,
        kill_after_seconds: float = 5.0,
        device_dir: Path | str | None = DEFAULT_DEVICE_DIR,
        notify_socket: Path | str | None = None,
        spawner_socket: Path | str | None = None,
        sandbox: str = "auto",
        sandbox_readonly_paths: Sequence[str] = (),
        sandbox_pids_limit: int = DEFAULT_PIDS_LIMIT,
        sandbox_bridge: str | None = None,
        sandbox_subnet: str | None = None,
        sandbox_egress_nat: bool = True,
        sandbox_spare_namespaces: int = sandbox_net.DEFAULT_SPARES,
        image_store_dir: Path | str | None = None,
        image_pull: bool = False,
        image_cache_keep: int = DEFAULT_CACHE_KEEP,
        gpu_driver: str = "auto",
        job_path: str = JOB_PATH,
    ) -> None:
        """``nodes`` declares the inventory (``name:gpu_type:gpus[:cpus:memoryMiB],...``,
        BackendNodes, or a function returning them, asked at every call); without it the
        host is one node with the GPUs NVML finds.
        ``kill_after_seconds``: how long what a command leaves running when it exits gets
        between SIGTERM and SIGKILL. ``device_dir``: where the GPUs' device files are.
        ``notify_socket``: where each worker's init reports its end (``local_ends``).
        ``spawner_socket``: where the resident spawner forks inits (``local_spawner``);
        where none answers, each init is a fresh interpreter.
        ``sandbox``: "runc" runs each worker in a container of its own (``sandbox.py``),
        "auto" (the default) does where runc can run here (root, runc, tini, writable
        cgroups) and runs bare processes elsewhere, saying why (``sandbox_note``), "none"
        runs bare processes; ``sandbox_readonly_paths`` are shown to every container
        beside the system, and ``sandbox_pids_limit`` caps each container's processes;
        each job's network namespace has an address of ``sandbox_subnet`` on
        ``sandbox_bridge`` (``sandbox_net.DEFAULT_SUBNET`` and ``DEFAULT_BRIDGE`` when not
        given), and egress NAT where ``sandbox_egress_nat``; ``sandbox_spare_namespaces``
        are kept made ahead, off the deployments' path (``BridgeNetwork.keep_spares``).
        Jobs' images come from the OCI layouts in ``image_store_dir`` (None: jobs run on the
        host's system alone), pulled from their registries where missing if ``image_pull``,
        ``image_cache_keep`` of them kept unpacked beyond those in use (``images``); a GPU
        worker's image gets the host's NVIDIA driver files found by ``gpu_driver``
        ("auto": the linker's cache; a directory; "none": not any).
        ``job_path``: each worker's PATH unless the job sets its own.
        Raises ValueError for a malformed inventory, or a sandbox this host cannot run."""
        self.state_dir = Path(state_dir)
        self.log_dir = Path(log_dir)
        self.switches_users = can_switch_users()
        for directory in (self.state_dir, self.log_dir):
            directory.mkdir(parents=True, exist_ok=True)
            if directory.stat().st_uid == os.geteuid():
                directory.chmod(TRAVERSABLE if self.switches_users else PRIVATE)
        self._live = LiveJobs(self.state_dir)
        self.kill_after_seconds = kill_after_seconds
        self.job_path = job_path
        self.notify_socket = Path(notify_socket) if notify_socket else None
        self.spawner_socket = Path(spawner_socket) if spawner_socket else None
        self._node_source = nodes if callable(nodes) else None
        self._pinned_nodes: list[BackendNode] | None = None  # see nodes_pinned
        if isinstance(nodes, str):
            nodes = parse_declared_nodes(nodes, *host_resources())
        self._nodes: list[BackendNode] | None = (
            list(nodes) if nodes is not None and not callable(nodes) else None
        )
        self._cgroups = Cgroups(Path(cgroup_root) if cgroup_root else None)
        self._devices = GpuDevices(Path(device_dir) if device_dir else None)
        self._device_dir = Path(device_dir) if device_dir else None
        self.sandbox: Sandbox | None = for_backend(
            sandbox, self.state_dir, tuple(sandbox_readonly_paths), sandbox_pids_limit
        )
        # Why "auto" found no sandbox here ("" when it has one, or none was asked for).
        self.sandbox_note = available() if sandbox == "auto" and self.sandbox is None else ""
        self._network = (
            BridgeNetwork(
                sandbox_bridge or sandbox_net.DEFAULT_BRIDGE,
                sandbox_subnet or sandbox_net.DEFAULT_SUBNET,
                sandbox_egress_nat,
            )
            if self.sandbox is not None
            else None
        )
        self.spare_namespaces = sandbox_spare_namespaces
        self._reaper = Reaper(self.state_dir / ".removing", self._finish_removals)
        self.images = image_store(
            image_store_dir, self.state_dir / ".images", image_pull, image_cache_keep
        )
        self._driver_files = driver_files(gpu_driver) if self.images else ()
        if self.sandbox is not None and self._network is not None:
            logger.info("Local backend: jobs run in runc containers (%s)", self.limits_in_force)
        elif self.sandbox_note:
            logger.warning(
                "Local backend: no sandbox here (%s); jobs run as bare processes (%s)",
                self.sandbox_note, self.limits_in_force,
            )  # fmt: skip

    @property
    def limits_enforced(self) -> bool:
        """Whether workers' CPU and memory limits are enforced (cgroup v2)."""
        return self._cgroups.enabled

    @property
    def limits_note(self) -> str:
        """Why limits are not enforced ("" when they are)."""
        return self._cgroups.reason

    @property
    def containment(self) -> str:
        """Whether jobs run in containers here, in one sentence (the start's banner, the
        API's tenancy)."""
        if self.sandbox is not None:
            return (
                "Each job runs in a runc container of its own: its own processes, /tmp, "
                "network namespace and cgroup limits."
            )
        why = self.sandbox_note or "TRAINYARD_LOCAL_SANDBOX=none"
        return (
            f"Jobs run as bare processes, not in containers ({why}): they see the host's "
            "processes and its loopback ports."
        )

    @property
    def limits_in_force(self) -> str:
        """Which isolation and limits workers run under, in words."""
        if self.sandbox is not None and self._network is not None:
            return f"{self.sandbox.describe()}; {self._network.describe()}"
        bare = f"bare processes (no sandbox: {self.sandbox_note}); " if self.sandbox_note else ""
        if self._cgroups.enabled:
            return f"{bare}cgroup v2 ({self._cgroups.root}): cpu.max and memory.max per worker"
        return (
            f"{bare}setrlimit: each process's memory (RLIMIT_DATA) is capped at its "
            f"worker's; CPU is not limited (no cgroup v2: {self._cgroups.reason})"
        )

    def isolation(self, launch: JobLaunch) -> Isolation:
        if not self.switches_users:
            who = f"{own_run_as().describe()}, the portal's own account (single-user mode)"
        elif launch.run_as is None:
            who = "nobody: the owner has no Unix account, so the job cannot run"
        else:
            who = launch.run_as.describe()
        return Isolation(run_as=who, limits=self.limits_in_force)

    def session_confinement(
        self, job_id: str, rank: int = 0, wait_seconds: float = 0.0
    ) -> Confinement | None:
        """What a session into the running worker must join (its account, directory,
        environment and limits), as its init confined it; None when it is not there.

        A worker whose init is still making its container (the job is reported running
        as soon as it is deployed) is waited for up to ``wait_seconds``."""
        deadline = time.monotonic() + wait_seconds
        logged = False
        while True:
            confinement, starting = self._worker_confinement(job_id, rank)
            if not starting or time.monotonic() >= deadline:
                return confinement
            if not logged:
                logger.info("Worker %s of job %s: waiting for its container to start", rank, job_id)
                logged = True
            time.sleep(CONTAINER_START_POLL_SECONDS)

    def _worker_confinement(self, job_id: str, rank: int) -> tuple[Confinement | None, bool]:
        """The running worker's confinement, and whether its init is still making its
        container (then no confinement yet)."""
        state = self._read_state(job_id) or {"workers": []}
        for worker in state["workers"]:
            if worker["rank"] == rank and _init_process(worker) is not None:
                confinement = Confinement.from_json(worker["confinement"])
                if confinement.sandbox and not _container_runs(confinement.sandbox):
                    return None, True
                return confinement, False
        return None, False

    def job_pids(self, job_id: str) -> set[int]:
        """The processes of the job while it runs: what its workers' inits started and
        every process of the owner's marked as the job's (its SSH sessions' included),
        never the inits themselves."""
        state = self._read_state(job_id)
        if state is None:
            return set()
        pids = set()
        for worker in state["workers"]:
            init = _init_process(worker)
            if init is not None:
                with contextlib.suppress(psutil.Error):
                    pids |= {child.pid for child in init.children(recursive=True)}
        pids |= {process.pid for process in _marked_processes(_marker(state), _owner_uid(state))}
        return pids

    # --- the interface ---------------------------------------------------------------------

    def deploy(self, launch: JobLaunch) -> None:
        if not launch.workers:
            raise DeployError(f"Job {launch.job_id} has no workers to start.")
        run_as = self._run_as(launch)
        with self._deploy_locked(launch):
            state = self._read_state(launch.job_id)
            if state and state["attempt"] == launch.attempt and state["complete"]:
                return
            if state:  # an earlier attempt, or a deployment cut short by a crash
                self._remove_locked(launch.job_id)
            image = self._image_root(launch)  # before anything of the attempt is made
            nodes = {node.name: node for node in self.nodes()}
            strangers = sorted({w.node for w in launch.workers} - set(nodes))
            if strangers:
                raise DeployError(
                    f"Node {', '.join(strangers)} is not one of this host's nodes "
                    f"({', '.join(nodes)})."
                )
            working_dir = Path(launch.working_dir or self._job_dir(launch.job_id) / "work")
            if launch.working_dir and not working_dir.is_dir():
                raise LaunchRefused(f"The working directory {working_dir} does not exist.")
            state = {
                "job_id": launch.job_id,
                "attempt": launch.attempt,
                "master_port": _free_port(),
                "rdzv_port": _free_port(),
                "workers": [],
                "worker_count": len(launch.workers),
                "complete": False,
                "stop_requested_at": None,
                "grace_seconds": None,
                "killed_at": None,
                "inits_killed": False,
                "network": None,
            }
            if any(not nodes[spec.node].declared for spec in launch.workers):
                self._release_idle_devices()
            try:
                self._make_job_dirs(launch.job_id, run_as, own_work_dir=not launch.working_dir)
                self._write_state(state)
                self._job_network(state)
                for spec in launch.workers:
                    self._start_worker(launch, spec, nodes, state, run_as, image, working_dir)
                crash_point("local-deploy-before-complete")
            except (
                OSError, subprocess.SubprocessError, psutil.Error, DeployError, NetworkError
            ) as error:  # fmt: skip
                self._remove_locked(launch.job_id)
                rank = max(len(state["workers"]) - 1, 0)  # the one being started
                raise DeployError(
                    f"Could not start worker {rank} of job {launch.job_id}: {error}"
                ) from error
            state["complete"] = True
            self._write_state(state)

    def resize(self, launch: JobLaunch, grace_seconds: float) -> None:
        run_as = self._run_as(launch)
        with self._deploy_locked(launch):
            state = self._read_state(launch.job_id)
            if state is None or state["attempt"] != launch.attempt or not state["complete"]:
                return  # not deployed (yet), or another attempt: deploy and reconcile decide
            if state["stop_requested_at"] is not None:
                return  # being stopped
            if [w["rank"] for w in state["workers"]] == [s.rank for s in launch.workers]:
                return  # already at this size
            # Every worker is restarted into a new rendezvous of the new size (torch 2.13's
            # agents did not complete a round with late joiners here; see elastic.py).
            stop_workers(state["workers"], grace_seconds, self.kill_after_seconds)
            for worker in state["workers"]:
                Cgroups.delete(worker["cgroup"])
                self._devices.release(worker.get("devices", []))
            state["workers"] = []
            state["worker_count"] = len(launch.workers)
            state["rdzv_round"] = state.get("rdzv_round", 0) + 1
            state["rdzv_port"] = _free_port()
            self._write_state(state)
            joining = launch.workers
            nodes = {node.name: node for node in self.nodes()}
            working_dir = Path(launch.working_dir or self._job_dir(launch.job_id) / "work")
            image = self._image_root(launch)
            try:
                for spec in joining:
                    self._start_worker(launch, spec, nodes, state, run_as, image, working_dir)
            except (OSError, subprocess.SubprocessError, psutil.Error) as error:
                raise DeployError(f"Could not grow job {launch.job_id}: {error}") from error

    def _start_worker(
        self,
        launch: JobLaunch,
        spec: WorkerSpec,
        nodes: dict[str, BackendNode],
        state: dict[str, Any],
        run_as: RunAs,
        image: ImageRoot | None,
        working_dir: Path,
    ) -> None:
        """Start one worker of the attempt on the job's network (an elastic job's under
        torchrun's elastic agent, rendezvous on the job's address)."""
        declared = nodes[spec.node].declared
        master = (state.get("network") or {}).get("address") or "127.0.0.1"
        env = worker_env(
            launch, spec, state["master_port"], declared, run_as, master, self.job_path
        )
        if launch.elastic:
            # A job's workers share one network namespace (one address, and each its own
            # pid 1...): each agent names itself by a loopback address of its own, which
            # the others reach there, so that the rendezvous tells the agents apart.
            endpoint = rendezvous_endpoint("127.0.0.1", state["rdzv_port"])
            env |= elastic_env(launch, endpoint)
            own = f"127.0.0.{spec.rank + 1}"
            round_id = f"{launch.job_id}-{launch.attempt}-{state.get('rdzv_round', 0)}"
            command = elastic_command(launch, spec.rank, endpoint, own, round_id)
            launch = replace(launch, command=command)
        env = environment(image, env, launch.env) if image else env
        self._start(launch, spec, env, working_dir, run_as, declared, state, image)

    def stop(self, job_id: str, grace_seconds: float) -> None:
        with self._locked(job_id):
            state = self._read_state(job_id)
            if state is None:
                return
            if not state["complete"]:  # cut short by a crash (we hold the lock): undo it
                self._remove_locked(job_id)
                return
            if state["stop_requested_at"] is None:
                state["stop_requested_at"] = time.time()
                state["grace_seconds"] = max(0.0, float(grace_seconds))
                self._write_state(state)
                for worker in state["workers"]:
                    init = _init_process(worker)
                    if init is not None:
                        _signal(init, signal.SIGTERM)  # the init forwards it to the group
                    elif _status(worker) is None:
                        for stray in _marked_processes(_marker(state, worker), _owner_uid(state)):
                            _signal(stray, signal.SIGTERM)
            self._enforce_grace(state)

    def reports(self) -> dict[str, JobReport]:
        reports = {}
        for state in self._states():
            if not state["complete"] and self._undo_if_abandoned(state["job_id"]):
                continue
            report = _report(state)
            if self._kill_due(state) and not report.ended:
                with self._locked(state["job_id"]):
                    state = self._read_state(state["job_id"]) or state
                    self._enforce_grace(state)
                report = _report(state)
            reports[state["job_id"]] = report
        return reports

    def remove(self, job_id: str) -> None:
        with self._locked(job_id):
            self._remove_locked(job_id)

    def _undo_if_abandoned(self, job_id: str) -> bool:
        """Undo a deployment that its deployer left incomplete (it died: nobody holds the
        lock); whether it was undone. One in progress (the lock taken) is left be."""
        with self._locked(job_id, wait=False) as taken:
            if not taken:
                return False
            state = self._read_state(job_id)
            if state is None or state["complete"]:
                return state is None
            self._remove_locked(job_id)
            return True

    @contextlib.contextmanager
    def nodes_pinned(self) -> Iterator[None]:
        """An inventory asked at every call (the registered nodes) is asked once on entry
        and answered from that within: a batch's deployments, in their threads, share it."""
        if self._node_source is None or self._pinned_nodes is not None:
            yield
            return
        self._pinned_nodes = list(self._node_source())
        try:
            yield
        finally:
            self._pinned_nodes = None

    def nodes(self) -> list[BackendNode]:
        if self._pinned_nodes is not None:
            return list(self._pinned_nodes)
        if self._node_source is not None:
            return list(self._node_source())
        if self._nodes is None:
            millicpus, memory = host_resources()
            devices = discover_gpus()
            host = socket.gethostname().split(".")[0].lower() or "localhost"
            gpu_type = gpu_type_of(devices[0]) if devices else "cpu"
            self._nodes = [BackendNode(host, gpu_type, len(devices), millicpus, memory)]
        return list(self._nodes)

    def init_pids(self, job_id: str) -> dict[int, int | None]:
        """Each worker's init pid by rank, while it runs (for operators and tests)."""
        state = self._read_state(job_id) or {"workers": []}
        return {
            w["rank"]: init.pid if (init := _init_process(w)) else None for w in state["workers"]
        }

    # --- workers ---------------------------------------------------------------------------

    def _run_as(self, launch: JobLaunch) -> RunAs:
        """The account the launch's processes run as: its owner's, never root's; or, in
        single-user mode, this process's own."""
        if not self.switches_users:
            return own_run_as()
        run_as = launch.run_as
        if run_as is None:
            raise LaunchRefused(
                f"The owner of job {launch.job_id} ({launch.owner}) has no Unix account; "
                "jobs never run as root."
            )
        if run_as.uid == 0 or run_as.gid == 0:
            raise LaunchRefused(f"Job {launch.job_id} would run as root ({run_as.describe()}).")
        return run_as

    def _image_root(self, launch: JobLaunch) -> ImageRoot | None:
        """The unpacked root of the launch's image (None: it names none, and sees the
        host's system). LaunchRefused where the site cannot give it."""
        if not launch.image:
            return None
        if self.sandbox is None or self.images is None:
            runs = "in no sandbox" if self.sandbox is None else "with no image store"
            raise LaunchRefused(
                f"Job {launch.job_id} names the image {launch.image}, but this host runs jobs "
                f"{runs}: leave the image empty to run on the host's system."
            )
        try:
            return self.images.root_of(launch.image)
        except ImageMissing as error:
            raise LaunchRefused(str(error)) from error
        except OSError as error:  # ImageBroken among them
            raise DeployError(f"The image {launch.image} cannot be used: {error}") from error

    def _release_idle_devices(self) -> None:
        """Every GPU no live worker holds goes back to root alone (the host may have left
        its device files open to all, as the driver does by default)."""
        held = {
            gpu
            for state in self._states()
            for worker in state["workers"]
            if _init_process(worker) is not None
            for gpu in worker.get("devices", [])
        }
        self._devices.release([gpu for gpu in self._devices.present() if gpu not in held])

    def _make_job_dirs(self, job_id: str, run_as: RunAs, own_work_dir: bool) -> None:
        """The backend's directory for the job (root's, passable), the job's own working
        directory when it names none, and its log directory (both the owner's, 0700)."""
        job_dir = self._job_dir(job_id)
        job_dir.mkdir(exist_ok=True)
        job_dir.chmod(TRAVERSABLE if self.switches_users else PRIVATE)
        owned = [self._log_dir(job_id)] + ([job_dir / "work"] if own_work_dir else [])
        for directory in owned:
            # Made fresh, or kept from an earlier attempt; either way under a directory of
            # the backend's, so that the job could not have put a link in its place.
            directory.mkdir(mode=PRIVATE, exist_ok=True)
            if self.switches_users:
                os.chown(directory, run_as.uid, run_as.gid, follow_symlinks=False)
            directory.chmod(PRIVATE)

    def _start(
        self,
        launch: JobLaunch,
        spec: WorkerSpec,
        env: dict[str, str],
        working_dir: Path,
        run_as: RunAs,
        declared: bool,
        state: dict[str, Any],
        image: ImageRoot | None = None,
    ) -> None:
        """Record one worker in the state, then start its init, detached, held until its
        pid is recorded too."""
        job_dir = self._job_dir(launch.job_id)
        prefix = f"a{launch.attempt}-worker-{spec.rank}"
        status_file, pid_file = job_dir / f"{prefix}.status.json", job_dir / f"{prefix}.pid"
        confinement_file = job_dir / f"{prefix}.confinement.json"
        log_file = self._log_dir(launch.job_id) / f"worker-{spec.rank}.log"
        container = container_name(launch.job_id, launch.attempt, spec.rank)
        cgroup = None
        if self.sandbox is None:
            cgroup = self._cgroups.create(container, spec.millicpus, spec.memory)
        bare = self.sandbox is None and not cgroup
        memory_rlimit = {"RLIMIT_DATA": spec.memory * MIB} if bare and spec.memory else {}
        devices = [] if declared else list(spec.gpus)
        sandboxed = None
        if self.sandbox is not None:
            bundle = (
                job_dir / f"{prefix}.bundle"
                if image
                else self.sandbox.bundle_path(container, job_dir, prefix)
            )
            sandboxed = reference(self.sandbox, container, bundle)
            self._write_bundle(
                bundle, launch, spec, container, env, working_dir, run_as, devices, state, image
            )
        confinement = Confinement(
            uid=run_as.uid,
            gid=run_as.gid,
            groups=run_as.groups,
            user=run_as.name,
            working_dir=str(working_dir),
            env=env,
            cgroup=str(cgroup) if cgroup else None,
            rlimits=memory_rlimit,
            switch_user=self.switches_users,
            sandbox=sandboxed,
        )
        worker: dict[str, Any] = {
            "rank": spec.rank,
            "node": spec.node,
            "gpus": list(spec.gpus),
            "devices": devices,
            "status_file": str(status_file),
            "cgroup": str(cgroup) if cgroup else None,
            "confinement": confinement.to_json(),
            "pid": None,
            "create_time": None,
        }
        state["workers"].append(worker)
        self._write_state(state)  # before anything of it starts
        crash_point("local-worker-recorded")
        _write_private(confinement_file, json.dumps(confinement.to_json()))
        self._devices.assign(devices, run_as.uid, run_as.gid)
        init_args = ["--status-file", str(status_file), "--log-file", str(log_file)]
        init_args += ["--kill-after", str(self.kill_after_seconds)]
        init_args += ["--confinement", str(confinement_file)]
        init_args += ["--notify-socket", str(self.notify_socket)] if self.notify_socket else []
        init_args += ["--", "/bin/sh", "-c", launch.command]
        go_read, go_write = os.pipe()  # the init waits on it until its pid is recorded
        unclosed = [go_read, go_write]
        started = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            with os.fdopen(open_log(str(log_file), run_as.uid, run_as.gid), "a") as log:
                log.write(f"=== attempt {launch.attempt} on {spec.node} at {started} ===\n")
                log.flush()
                pid = self._spawned_init(init_args, job_dir, go_read, log)
                if pid is None:
                    pid = _exec_init(init_args, job_dir, go_read, log, pid_file, log_file)
            os.close(unclosed.pop(0))  # the init's end: ours closed, the pipe ends with us
            worker["pid"] = pid
            worker.update(process_identity.record_of(pid))
            crash_point("local-init-started")
            self._write_state(state)
            crash_point("local-pid-recorded")
            os.write(go_write, b"go")
        finally:
            for descriptor in unclosed:
                os.close(descriptor)

    def _job_network(self, state: dict[str, Any]) -> JobNetwork | None:
        """The job's network namespace (recorded in the state before it is made), with the
        sandbox on."""
        if self._network is None:
            return None
        network = self._network.plan()
        state["network"] = {"netns": network.netns, "address": network.address}
        self._write_state(state)
        self._network.create(network)
        self._network.keep_spares(self.spare_namespaces)
        return network

    def job_address(self, job_id: str) -> str | None:
        """The address of the job's network namespace on the sandbox's bridge (where the
        host reaches its ports); None without the sandbox."""
        state = self._read_state(job_id) or {}
        network = state.get("network") or {}
        address: str | None = network.get("address")
        return address

    def job_namespace(self, job_id: str) -> str | None:
        """The path of the job's network namespace (where its ``127.0.0.1`` is), for the
        gateway to connect to the job's ports in it; None without the sandbox."""
        state = self._read_state(job_id) or {}
        network = state.get("network") or {}
        if not network.get("netns"):
            return None
        return JobNetwork(network["netns"], network["address"]).path

    def _write_bundle(
        self,
        bundle: Path,
        launch: JobLaunch,
        spec: WorkerSpec,
        container: str,
        env: dict[str, str],
        working_dir: Path,
        run_as: RunAs,
        devices: list[int],
        state: dict[str, Any],
        image: ImageRoot | None,
    ) -> None:
        """The bundle of the worker's container: what it runs, as whom, where, with what."""
        assert self.sandbox is not None  # only asked with the sandbox on
        writable = [str(working_dir), str(self._log_dir(launch.job_id)), run_as.home or ""]
        drivers = self._driver_files if image and devices else ()
        worker = Worker(
            container=container,
            argv=["/bin/sh", "-c", launch.command],
            env=with_driver_paths(env) if drivers else env,
            cwd=str(working_dir),
            uid=run_as.uid,
            gid=run_as.gid,
            groups=run_as.groups,
            hostname=container,
            writable_paths=(*writable, launch.output_path),
            readonly_paths=(launch.data_path,),
            millicpus=spec.millicpus,
            memory_mib=spec.memory,
            gpu_devices=gpu_device_paths(self._device_dir, devices),
            netns=JobNetwork(**network).path if (network := state.get("network")) else None,
            image_root=str(image.rootfs) if image else "",
            driver_files=drivers,
        )
        write_bundle(bundle, self.sandbox, worker)

    def _spawned_init(
        self, init_args: list[str], job_dir: Path, go_read: int, log: TextIO
    ) -> int | None:
        """The pid of the init the resident spawner forked; None when none answers."""
        if self.spawner_socket is None:
            return None
        try:
            return spawn(
                str(self.spawner_socket), init_args, str(job_dir), go_read, log.fileno(),
                timeout=START_TIMEOUT_SECONDS,
            )  # fmt: skip
        except SpawnError as error:
            raise DeployError(f"the spawner could not start its init: {error}") from error

    def _kill_due(self, state: dict[str, Any]) -> bool:
        """Whether a stopping job's processes (or, later, its inits) are to be killed now."""
        if state["stop_requested_at"] is None or state["inits_killed"]:
            return False
        now = time.time()
        killed_at: float | None = state["killed_at"]
        if killed_at is not None:
            return now >= killed_at + self.kill_after_seconds + KILL_WAIT_SECONDS
        stop_requested_at: float = state["stop_requested_at"]
        grace_seconds: float = state["grace_seconds"]
        return now >= stop_requested_at + grace_seconds

    def _enforce_grace(self, state: dict[str, Any]) -> None:
        """Past the grace period, SIGKILL all the job's processes but the inits, which then
        record the exit; inits still there well after that are killed too."""
        if not self._kill_due(state):
            return
        kill_inits = state["killed_at"] is not None
        running = [worker for worker in state["workers"] if _status(worker) is None]
        _kill_job(state, running, kill_inits=kill_inits)
        state["inits_killed"] = kill_inits
        state["killed_at"] = state["killed_at"] or time.time()
        self._write_state(state)

    def _remove_locked(self, job_id: str) -> None:
        state = self._read_state(job_id)
        job_dir = self._job_dir(job_id)
        # Containers all stopped: the namespace and bundles go off the caller's path.
        later = self.sandbox is not None and state is not None and _ended_cleanly(state)
        if state is not None:
            if not _ended_cleanly(state):
                _wait_dead(_kill_job(state, state["workers"], kill_inits=True))
                for _ in range(STRAY_ROUNDS):  # what it forked between the look and the kill
                    strays = _marked_processes(_marker(state), _owner_uid(state))
                    if not strays:
                        break
                    for stray in strays:
                        _signal(stray, signal.SIGKILL)
                    _wait_dead(strays)
            # Now, under the job's lock: a deployment of the same attempt reuses their names.
            remove_containers(_containers(state["workers"]))
            if state.get("network") and self._network is not None and not later:
                self._network.remove(JobNetwork(**state["network"]))
            for worker in state["workers"]:
                Cgroups.delete(worker["cgroup"])
                self._devices.release(worker.get("devices", []))
        if job_dir.is_dir():
            release_roots(job_dir)
            entry = self._reaper.entry(job_id) if later else None
            for path in job_dir.iterdir():
                if path.name == "work":  # the job's files stay, as its logs do
                    continue
                if entry is not None:  # state.json among them: the job is gone from here
                    path.rename(entry / path.name)
                else:
                    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                job_dir.rmdir()
            if entry is not None:
                self._reaper.queue(entry)
                self._reaper.soon()
        self._live.discard(job_id)  # its state is gone

    def _finish_removals(self, entries: list[Path]) -> None:
        """What removals left to the reaper (``local_removal``) in ``entries``: the network
        namespaces their states name (never another job's: each has a name of its own); the
        bundles go with the entries."""
        states = [state for entry in entries if (state := _read_json(entry / "state.json"))]
        if self._network is not None:
            networks = [JobNetwork(**state["network"]) for state in states if state.get("network")]
            self._network.remove_all(networks)

    def finish_removals(self) -> None:
        """Until what removals left to this process's reaper is done, and every entry
        any process left unfinished too (for tests, and hosts that stop)."""
        self._reaper.wait()
        self._reaper.finish_all()

    # --- state on disk ---------------------------------------------------------------------

    def default_working_dir(self, job_id: str) -> str:
        return str(self._job_dir(job_id) / "work")

    def _job_dir(self, job_id: str) -> Path:
        return self.state_dir / _checked_job_id(job_id)

    def _log_dir(self, job_id: str) -> Path:
        return self.log_dir / _checked_job_id(job_id)

    @contextlib.contextmanager
    def _deploy_locked(self, launch: JobLaunch) -> Iterator[None]:
        """A deployment onto declared nodes only locks its job, so that many deploy at once;
        one that hands out real GPUs' device files also locks them all (it releases the
        devices no live worker holds, which a deployment beside it could be assigning)."""
        declared = {node.name for node in self.nodes() if node.declared}
        if all(worker.node in declared for worker in launch.workers):
            with self._locked(launch.job_id):
                yield
        else:
            with self._locked(), self._locked(launch.job_id):
                yield

    @contextlib.contextmanager
    def _locked(self, job_id: str | None = None, wait: bool = True) -> Iterator[bool]:
        """One change at a time to a job (one of a few dozen lock stripes), or with no job
        to the devices, across every process using this state directory; with
        ``wait=False``, yields whether the lock was free (and then taken)."""
        name = ".lock" if job_id is None else f".lock-{zlib.crc32(job_id.encode()) % LOCK_STRIPES}"
        # Private: another account that could open it could take the lock and keep it.
        descriptor = os.open(self.state_dir / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "r+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_state(self, job_id: str) -> dict[str, Any] | None:
        return _read_json(self._job_dir(job_id) / "state.json")

    def _write_state(self, state: dict[str, Any]) -> None:
        self._live.before_state(state["job_id"])
        _write_private(self._job_dir(state["job_id"]) / "state.json", json.dumps(state))

    def _states(self) -> Iterator[dict[str, Any]]:
        """Every job this backend holds (``live_jobs``)."""
        for job_id in self._live.names():
            state = self._read_state(job_id)
            if state is not None:
                yield state


# --- helpers ------------------------------------------------------------------------------


def _checked_job_id(job_id: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", job_id) or job_id.startswith("."):
        raise ValueError(f"Not a job id: {job_id!r}")
    return job_id


def _write_private(path: Path, text: str) -> None:
    """Write atomically a file only this account may read (mode 0600)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    partial.replace(path)


def worker_env(
    launch: JobLaunch,
    spec: WorkerSpec,
    master_port: int,
    declared: bool,
    run_as: RunAs | None = None,
    master_addr: str = "127.0.0.1",
    job_path: str = JOB_PATH,
) -> dict[str, str]:
    """A worker's environment: ``job_path`` as PATH, a few host variables, the
    owner's account (HOME, USER, LOGNAME), the job's own, then what ``torch.distributed``
    and Trainyard set (those win)."""
    on_node = [w.rank for w in launch.workers if w.node == spec.node]
    env = {"PATH": job_path}
    env |= {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    if run_as is not None:
        env |= {"USER": run_as.name, "LOGNAME": run_as.name}
        env |= {"HOME": run_as.home} if run_as.home else {}
    env |= launch.env
    env |= {
        "WORLD_SIZE": str(len(launch.workers)),
        "RANK": str(spec.rank),
        "LOCAL_RANK": str(on_node.index(spec.rank)),
        "LOCAL_WORLD_SIZE": str(len(on_node)),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TRAINYARD_JOB_ID": launch.job_id,
        "TRAINYARD_ATTEMPT": str(launch.attempt),
        "TRAINYARD_NODE": spec.node,
        "TRAINYARD_DATA_PATH": launch.data_path,
        "TRAINYARD_OUTPUT_PATH": launch.output_path,
        # NVML numbers GPUs by PCI bus; CUDA must count them the same way.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in spec.gpus),
        "PYTHONUNBUFFERED": "1",
        WORKER_MARKER: f"{launch.job_id}/{launch.attempt}/{spec.rank}",
    }
    if declared:
        env["TRAINYARD_GPUS_DECLARED"] = "1"
    return env


def _container_runs(sandbox: dict[str, str]) -> bool:
    """Whether the worker's container was made (runc wrote its pid in the bundle)."""
    return os.path.exists(os.path.join(sandbox["bundle"], runc.CONTAINER_PID_FILE))


def _exec_init(
    init_args: list[str], job_dir: Path, go_read: int, log: TextIO, pid_file: Path, log_file: Path
) -> int:
    """Start an init as a fresh interpreter (no spawner runs): it detaches, recording its
    pid in ``pid_file``; returns that pid."""
    argv = [sys.executable, "-I", "-S", str(INIT_SCRIPT), "--pid-file", str(pid_file)]
    argv += ["--go-fd", str(go_read), *init_args]
    launcher = subprocess.Popen(
        argv,
        cwd=job_dir,
        env=INIT_ENV,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        pass_fds=(go_read,),
    )
    # The launcher forks the init and exits at once, leaving nothing here to reap.
    if launcher.wait(timeout=START_TIMEOUT_SECONDS) != 0 or not pid_file.exists():
        raise DeployError(f"its init exited with {launcher.returncode}; see {log_file}")
    pid = int(pid_file.read_text())
    pid_file.unlink()
    return pid


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None  # a file we write holds an object


def _status(worker: dict[str, Any]) -> dict[str, Any] | None:
    return _read_json(Path(worker["status_file"]))


def _init_process(worker: dict[str, Any]) -> psutil.Process | None:
    """The worker's init if it is still running (the same process, not a reused pid)."""
    if not worker["pid"]:
        return None
    try:
        init = psutil.Process(worker["pid"])
        if not process_identity.is_recorded(init, worker):
            return None
    except psutil.Error:
        return None
    return init if _alive(init) else None


def _marker(state: dict[str, Any], worker: dict[str, Any] | None = None) -> str:
    job = f"{state['job_id']}/"
    return job if worker is None else f"{job}{state['attempt']}/{worker['rank']}"


def _marked_processes(marker: str, uid: int | None = None) -> list[psutil.Process]:
    """Processes whose environment carries the marker (or one below it): what a worker
    left behind, found even when its init is gone. With ``uid``, only that account's:
    a job can put any marker in its own processes' environment, and must not make the
    backend signal another's."""
    found = []
    for process in psutil.process_iter(["environ", "uids"]):
        value = (process.info.get("environ") or {}).get(WORKER_MARKER, "")
        uids = process.info.get("uids")
        if uid is not None and (uids is None or uids.real != uid):
            continue
        if value and (value + "/").startswith(marker.rstrip("/") + "/"):
            found.append(process)
    return found


def _owner_uid(state: dict[str, Any]) -> int | None:
    """The uid the job's processes run as, when the backend switched to it."""
    for worker in state["workers"]:
        confinement = worker.get("confinement") or {}
        if confinement.get("switch_user"):
            uid: int = confinement["uid"]
            return uid
    return None


def _signal(process: psutil.Process, signum: int) -> None:
    with contextlib.suppress(psutil.Error):
        process.send_signal(signum)


def _kill_job(
    state: dict[str, Any], workers: list[dict[str, Any]], kill_inits: bool
) -> list[psutil.Process]:
    """SIGKILL everything the workers run, and what any attempt of the job left behind;
    the workers' inits only when ``kill_inits``. Returns the processes signalled."""
    inits = [init for init in map(_init_process, workers) if init is not None]
    if kill_inits:
        for init in inits:  # stopped, an init forks nothing between the look and the kill
            _signal(init, signal.SIGSTOP)
    targets: dict[int, psutil.Process] = {}
    for init in inits:
        with contextlib.suppress(psutil.Error):
            targets |= {child.pid: child for child in init.children(recursive=True)}
    marked = _marked_processes(_marker(state), _owner_uid(state))
    targets |= {process.pid: process for process in marked}
    for init in inits:
        targets.pop(init.pid, None)
    if kill_inits:
        targets |= {init.pid: init for init in inits}
        for worker in workers:
            Cgroups.kill(worker["cgroup"])
        remove_containers(_containers(workers))
    for process in targets.values():
        _signal(process, signal.SIGKILL)
    return list(targets.values())


def stop_workers(
    workers: list[dict[str, Any]], grace_seconds: float, kill_after_seconds: float
) -> None:
    """Stop some of a job's workers, the others running on: SIGTERM to each one's init
    (which forwards it to its command), their ends awaited for the grace period (and the
    inits' own kill of what is left), then whatever remains killed; their containers
    removed."""
    for worker in workers:
        init = _init_process(worker)
        if init is not None:
            _signal(init, signal.SIGTERM)
    give_up = time.monotonic() + grace_seconds + kill_after_seconds + KILL_WAIT_SECONDS
    while any(_init_process(w) is not None for w in workers) and time.monotonic() < give_up:
        time.sleep(0.05)
    inits = [init for init in map(_init_process, workers) if init is not None]
    targets = list(inits)
    for init in inits:
        with contextlib.suppress(psutil.Error):
            targets += init.children(recursive=True)
    for worker in workers:
        Cgroups.kill(worker["cgroup"])
    for process in targets:
        _signal(process, signal.SIGKILL)
    _wait_dead(targets)
    remove_containers(_containers(workers))


def _containers(workers: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The containers of the workers that run in one."""
    confinements = (worker.get("confinement") or {} for worker in workers)
    return [c["sandbox"] for c in confinements if c.get("sandbox")]


def _ended_cleanly(state: dict[str, Any]) -> bool:
    """Whether every worker's init recorded its end and is gone: each killed what its
    command left (its process group and every descendant) before writing its status, so
    nothing of the job is left to look for (among all the host's processes, a dear scan
    on a burst of short jobs)."""
    workers = state["workers"]
    return (
        state["complete"]
        and bool(workers)
        and all(_status(worker) is not None for worker in workers)
        and all(_init_process(worker) is None for worker in workers)
    )


def _wait_dead(processes: list[psutil.Process]) -> None:
    """Until the processes are gone or zombies (dead; reaping them is their parent's job)."""
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while processes and time.monotonic() < deadline:
        processes = [process for process in processes if _alive(process)]
        time.sleep(0.02 if processes else 0)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _worker_report(worker: dict[str, Any]) -> WorkerReport:
    for _ in range(2):  # the init may write its status between the two looks
        status = _status(worker)
        if status is not None:
            if _init_process(worker) is not None:
                # The init writes the status last, after its clean-up, then exits: the
                # worker has ended only once nothing of it is left.
                return WorkerReport(worker["rank"], WorkerState.RUNNING)
            code = status["exit_code"]
            state = WorkerState.SUCCEEDED if code == 0 else WorkerState.FAILED
            return WorkerReport(worker["rank"], state, code, status.get("reason", ""))
        if _init_process(worker) is not None:
            return WorkerReport(worker["rank"], WorkerState.RUNNING)
    return WorkerReport(worker["rank"], WorkerState.FAILED, None)  # died unwatched


def _report(state: dict[str, Any]) -> JobReport:
    workers = [
        WorkerReport(worker["rank"], WorkerState.PENDING)
        if worker["pid"] is None and not state["complete"]  # recorded, being started
        else _worker_report(worker)
        for worker in state["workers"]
    ]
    workers += [
        WorkerReport(rank, WorkerState.PENDING)
        for rank in range(len(workers), state["worker_count"])
    ]
    return JobReport(state["job_id"], state["attempt"], tuple(workers))
