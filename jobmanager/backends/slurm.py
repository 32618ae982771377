"""The Slurm backend: Trainyard decides, Slurm executes.

Each attempt of a job is one Slurm batch job (``slurm_script``): an allocation naming
exactly the nodes, GPUs, CPUs and memory the pure core placed, submitted with ``sbatch
--uid=<owner> --gid=<owner's group>`` so that Slurm runs every process as the job's owner
and group (without ``--gid``, root's group), as it runs a user's own jobs (the portal is
root on a submit host: Slurm's ``--uid`` is root's alone). Slurm
is told never to requeue it (``--no-requeue``): when a node fails, the attempt fails
with the node named, and Trainyard's retry rules requeue the job at the head of its queue.

Slurm is reached through its own commands and their machine-readable output (``sbatch
--parsable``, ``squeue --json``, ``sinfo --json``, ``scancel``, ``scontrol update``, in
``slurm_commands``), with the ``slurm.conf`` of ``TRAINYARD_SLURM_CONF``: the
controller's address, and munge's socket as the credential.

What Trainyard keeps of a job lives in ``<state>/<job id>/state.json`` (root's): the
attempt, its Slurm job id, each worker's node, and when a stop was asked with its grace,
so that a new instance in another process adopts the jobs that run. The batch script
writes each worker's exit status into ``<state>/<job id>/a<attempt>/`` (the owner's) and
each worker's output, which ``srun`` forwards to the batch node, into the log store:
both lie on a filesystem the nodes share with the portal (here the host's own; on a site,
the shared filesystem Slurm's nodes already mount).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jobmanager.backends.base import (
    NODE_UNHEALTHY,
    STOPPED,
    BackendNode,
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    JobReport,
    LaunchRefused,
    RunAs,
    WorkerReport,
    WorkerState,
)
from jobmanager.backends.elastic import elastic_command, elastic_env, rendezvous_endpoint
from jobmanager.backends.live_jobs import LiveJobs
from jobmanager.backends.local import JOB_PATH, worker_env
from jobmanager.backends.slurm_commands import SlurmCommands, SlurmError, SlurmJob, SlurmNode
from jobmanager.backends.slurm_rounds import (
    dependency,
    retire,
    settle_retiring,
    slurm_name,
    status_dir_name,
)
from jobmanager.backends.slurm_script import (
    allocation_options,
    batch_script,
    heterogeneous,
    node_shares,
    time_limit,
)
from jobmanager.backends.slurm_steps import WorkerStep
from jobmanager.faults import crash_point

TRAVERSABLE = 0o711
PRIVATE = 0o700
MASTER_PORTS = (29500, 2000)  # each attempt's rank 0 listens on base + crc32(id) % span
SIGTERM_EXIT = 143
SIGKILL_EXIT = 137
CORDON_REASON = "cordoned by Trainyard"
SWITCHES_EVERY = 300.0  # seconds between reads of Slurm's tree topology


class SlurmBackend(ClusterBackend):
    name = "slurm"
    resizes = True  # a new allocation of the new size: see slurm_rounds

    def __init__(
        self,
        state_dir: Path | str,
        log_dir: Path | str,
        conf: str = "",
        partition: str = "",
        commands: SlurmCommands | None = None,
        stop_grace: float = 30.0,
        job_path: str = JOB_PATH,
    ) -> None:
        """``conf``: the cluster's slurm.conf ("" for Slurm's default, /etc/slurm);
        ``partition``: where jobs go ("" for the cluster's default); ``stop_grace``: the
        job manager's grace on a stop, which Slurm's time limit leaves room for;
        ``job_path``: each worker's PATH unless the job sets its own (an elastic job's
        ``torchrun`` is found there)."""
        self.state_dir = Path(state_dir)
        self.log_dir = Path(log_dir)
        for directory in (self.state_dir, self.log_dir):
            directory.mkdir(parents=True, exist_ok=True)
            if directory.stat().st_uid == os.geteuid():
                directory.chmod(TRAVERSABLE)
        self._live = LiveJobs(self.state_dir)
        self.partition = partition
        self.stop_grace = stop_grace
        self.job_path = job_path
        self.slurm = commands or SlurmCommands(conf)
        self._pinned_nodes: list[SlurmNode] | None = None
        # Each node's leaf switch, read at most every SWITCHES_EVERY seconds.
        self._switches: tuple[float, dict[str, str]] = (-math.inf, {})

    def isolation(self, launch: JobLaunch) -> Isolation:
        who = (
            launch.run_as.describe()
            if launch.run_as
            else "nobody: the owner has no Unix account, so the job cannot run"
        )
        return Isolation(
            run_as=f"{who}, submitted to Slurm with sbatch --uid",
            limits="Slurm's: the allocation's CPUs, memory and GPUs, as the cluster's "
            "TaskPlugin and ProctrackType enforce them",
        )

    # --- the interface ---------------------------------------------------------------------

    def deploy(self, launch: JobLaunch) -> None:
        if not launch.workers:
            raise DeployError(f"Job {launch.job_id} has no workers to start.")
        run_as = _run_as(launch)
        state = self._read_state(launch.job_id)
        if state and state["attempt"] == launch.attempt and state["slurm_id"] is not None:
            return
        previous = state
        if previous and previous["attempt"] != launch.attempt:  # an earlier attempt
            self._cancel(previous)
        nodes, workers = self._placed(launch)
        state = {
            "job_id": launch.job_id,
            "attempt": launch.attempt,
            "round": 0,
            "retiring": [],
            "slurm_id": None,
            "workers": workers,
            "owner": {"uid": run_as.uid, "gid": run_as.gid, "name": run_as.name},
            "stop_requested_at": None,
            "grace_seconds": None,
            "killed_at": None,
        }
        # A submission cut short by a crash may have reached Slurm: adopt it, found by name.
        # (Without a state, nothing was submitted: it is written before sbatch runs.)
        cut_short = previous is not None and previous["attempt"] == launch.attempt
        self._make_job_dirs(launch, run_as, self._status_dir_of(state))
        script, options = self._batch_job(launch, run_as, nodes, state)
        self._write_state(state)  # once before sbatch, once after: two writes a deployment
        adopted = (
            self._slurm_job_named(slurm_name(launch.job_id, launch.attempt)) if cut_short else None
        )
        state["slurm_id"] = (
            adopted.job_id if adopted else self._submit(launch, run_as, script, options)
        )
        self._write_state(state)

    def _placed(self, launch: JobLaunch) -> tuple[dict[str, SlurmNode], list[dict[str, Any]]]:
        """The Slurm cluster's nodes by name, and the launch's workers as a state keeps them
        (each in its heterogeneous job's group where the nodes' shares differ); raises
        DeployError naming the workers' nodes that Slurm does not have."""
        nodes = {node.name: node for node in self._slurm_nodes()}
        strangers = sorted({w.node for w in launch.workers} - set(nodes))
        if strangers:
            raise DeployError(f"Node {', '.join(strangers)} is not in the Slurm cluster.")
        shares = node_shares(launch)
        het_groups = {s.node: i for i, s in enumerate(shares)} if heterogeneous(shares) else {}
        return nodes, _workers(launch, het_groups)

    def _batch_job(
        self,
        launch: JobLaunch,
        run_as: RunAs,
        nodes: dict[str, SlurmNode],
        state: dict[str, Any],
    ) -> tuple[str, list[str]]:
        """The attempt's batch script and sbatch options; each worker's environment and
        the working directory go into ``state`` (root's alone: they hold the job's
        secrets) for its sessions."""
        shares = node_shares(launch)
        master = nodes[min(launch.workers, key=lambda w: w.rank).node].address
        round_number = state.get("round", 0)
        round_key = f"{launch.job_id}/{launch.attempt}" + (
            f"/{round_number}" if round_number else ""
        )
        port = MASTER_PORTS[0] + zlib.crc32(round_key.encode()) % MASTER_PORTS[1]
        envs, commands = {}, {}
        for spec in launch.workers:
            env = worker_env(launch, spec, port, False, run_as, master, self.job_path)
            env.pop("CUDA_VISIBLE_DEVICES")  # Slurm sets it to the devices it gave the step
            if launch.elastic:  # under torchrun's agent; rank 0's hosts the rendezvous
                endpoint = rendezvous_endpoint(master, port + 1)
                env |= elastic_env(launch, endpoint)
                own = nodes[spec.node].address
                round_id = f"{launch.job_id}-{launch.attempt}-{round_number}"
                commands[spec.rank] = elastic_command(launch, spec.rank, endpoint, own, round_id)
            envs[spec.rank] = env
        job_dir = self._job_dir(launch.job_id)
        status_dir = self._status_dir_of(state)
        state["envs"] = {str(rank): env for rank, env in envs.items()}
        state["working_dir"] = launch.working_dir or str(job_dir / "work")
        script = batch_script(
            launch, shares, envs,
            working_dir=state["working_dir"],
            status_dir=str(status_dir),
            log_dir=str(self.log_dir / launch.job_id),
            commands=commands,
        )  # fmt: skip
        options = [
            f"--job-name={slurm_name(launch.job_id, launch.attempt, round_number)}",
            "--no-requeue", f"--output={status_dir / 'batch.log'}", "--kill-on-invalid-dep=yes",
            *([f"--partition={self.partition}"] if self.partition else []),
            *time_limit(launch.wall_time, self.stop_grace),
            *allocation_options(shares),
        ]  # fmt: skip
        return script, options

    def resize(self, launch: JobLaunch, grace_seconds: float) -> None:
        """A new round of the attempt at the launch's workers (see ``slurm_rounds``): its
        allocation submitted, held until the current one has ended, and the current one
        asked to stop with the grace. An attempt not deployed, being stopped, or already
        at the launch's workers is left alone; one whose last resize was cut short before
        Slurm had it is finished."""
        run_as = _run_as(launch)
        state = self._read_state(launch.job_id)
        if state is None or state["attempt"] != launch.attempt or state["stop_requested_at"]:
            return  # not deployed (yet), another attempt, or being stopped
        if state["slurm_id"] is None:
            if state.get("submission"):
                self._finish_submission(state)  # a resize cut short: finish it
            return  # else a deployment cut short: deploy and reconcile decide
        if [(w["rank"], w["node"]) for w in state["workers"]] == [
            (w.rank, w.node) for w in launch.workers
        ]:
            return  # already at this size
        nodes, workers = self._placed(launch)
        retire(state, grace_seconds)
        state |= {"round": state.get("round", 0) + 1, "slurm_id": None, "refused": None}
        state["workers"] = workers
        self._make_job_dirs(launch, run_as, self._status_dir_of(state))
        script, options = self._batch_job(launch, run_as, nodes, state)
        state["submission"] = {"script": script, "options": options}
        self._write_state(state)  # the round is decided: another instance finishes it
        crash_point("slurm-resize-before-sbatch")
        self._finish_submission(state)
        if state["refused"]:
            raise DeployError(state["refused"])

    def _finish_submission(self, state: dict[str, Any]) -> None:
        """Hand a resize's new round to Slurm (held until the retiring allocations have
        ended; adopted by name if a cut-short submission reached it), then ask those to
        stop. A round Slurm refuses is recorded: its workers are reported failed, and the
        job manager retries the job as for any failed gang. ``state`` is brought up to
        date: under the job's lock, another process may have finished it first."""
        with self._round_lock(state["job_id"]):
            current = self._read_state(state["job_id"]) or {}
            state.clear()
            state.update(current)
            if state.get("submission") and not state["stop_requested_at"]:
                self._submit_round(state)

    def _submit_round(self, state: dict[str, Any]) -> None:
        jobs = {job.job_id: job for job in self.slurm.jobs()}
        name = slurm_name(state["job_id"], state["attempt"], state["round"])
        adopted = next((j for j in jobs.values() if j.name == name and not j.ended), None)
        submission = state.pop("submission")
        if adopted is not None:
            state["slurm_id"] = adopted.job_id
        else:
            owner = state["owner"]
            options = [*submission["options"], *dependency(state, jobs)]
            try:
                state["slurm_id"] = self.slurm.submit(
                    submission["script"], owner["uid"], owner["gid"], options
                )
            except SlurmError as error:
                state["refused"] = (
                    f"Slurm refused the new allocation of job {state['job_id']} "
                    f"({len(state['workers'])} workers): {error}"
                )
        self._write_state(state)
        if settle_retiring(self.slurm, state, jobs):
            self._write_state(state)

    @contextlib.contextmanager
    def _round_lock(self, job_id: str) -> Iterator[None]:
        """One process at a time hands a job's new round to Slurm (a resize, and another
        instance's reports finishing one it believes cut short)."""
        with open(self._job_dir(job_id) / "round.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _submit(self, launch: JobLaunch, run_as: RunAs, script: str, options: list[str]) -> int:
        """Hand the batch job to Slurm as the owner; its Slurm job id."""
        try:
            return self.slurm.submit(script, run_as.uid, run_as.gid, options)
        except SlurmError as error:
            raise DeployError(f"Slurm refused job {launch.job_id}: {error}") from error

    def stop(self, job_id: str, grace_seconds: float) -> None:
        state = self._read_state(job_id)
        if state is None:
            return
        state.pop("submission", None)  # a resize's round not yet submitted never will be
        if state["slurm_id"] is None:  # never submitted
            self._cancel(state)
            return
        if state["stop_requested_at"] is None:
            state["stop_requested_at"] = time.time()
            state["grace_seconds"] = max(0.0, float(grace_seconds))
            self._write_state(state)
            job = self._slurm_job(state["slurm_id"])
            if job is not None and job.pending:
                self._cancel(state)  # nothing started: nothing to give a grace
            elif job is not None and not job.ended:
                with contextlib.suppress(SlurmError):  # ended meanwhile
                    self.slurm.signal(state["slurm_id"], "TERM")
        self._enforce_grace(state)

    def reports(self) -> dict[str, JobReport]:
        states = list(self._states())
        if not states:
            return {}
        jobs = {job.job_id: job for job in self.slurm.jobs()}
        bad = self.bad_nodes()
        reports = {}
        for state in states:
            if state.get("submission") and not state["stop_requested_at"]:
                self._finish_submission(state)  # a resize cut short
                jobs = {job.job_id: job for job in self.slurm.jobs()}
            if state.get("retiring") and settle_retiring(self.slurm, state, jobs):
                self._write_state(state)
            job = jobs.get(state["slurm_id"]) if state["slurm_id"] is not None else None
            if job is not None and self._exited_before_listed(state, job):
                # squeue was read before the worker's exit: ask again, for why it ended
                # (Slurm marks a timed-out job before it signals the job's steps)
                jobs = {job.job_id: job for job in self.slurm.jobs()}
                job = jobs.get(state["slurm_id"])
            if job is not None and not job.ended and self._kill_due(state):
                self._enforce_grace(state)
            reports[state["job_id"]] = self._report(state, job, bad)
        return reports

    def remove(self, job_id: str) -> None:
        state = self._read_state(job_id)
        if state is None:
            return
        job = self._slurm_job(state["slurm_id"]) if state["slurm_id"] is not None else None
        if (job is not None and not job.ended) or state.get("retiring"):
            self._cancel(state)
        job_dir = self._job_dir(job_id)
        for path in job_dir.iterdir() if job_dir.is_dir() else []:
            if path.name != "work":  # the job's files stay, as its logs do
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        self._live.discard(job_id)  # its state is gone

    @contextlib.contextmanager
    def nodes_pinned(self) -> Iterator[None]:
        """One ``sinfo`` for a batch of deployments."""
        if self._pinned_nodes is not None:
            yield
            return
        self._pinned_nodes = self.slurm.nodes()
        try:
            yield
        finally:
            self._pinned_nodes = None

    def worker_step(
        self, job_id: str, rank: int, slurm_jobs: list[SlurmJob] | None = None
    ) -> WorkerStep | None:
        """Where worker ``rank`` of the job runs, for a step into it (the gateway's
        sessions); None unless it runs now (started, not ended, no stop asked).
        ``slurm_jobs``: what ``squeue`` listed lately (asked now when not given)."""
        state = self._read_state(job_id)
        if state is None or state["slurm_id"] is None or state["stop_requested_at"]:
            return None
        worker = next((w for w in state["workers"] if w["rank"] == rank), None)
        owner = state.get("owner")
        if worker is None or owner is None or not self._started(state, rank):
            return None
        if self._exit_code(state, rank) is not None:
            return None
        listed = self.slurm.jobs() if slurm_jobs is None else slurm_jobs
        job = next((job for job in listed if job.job_id == state["slurm_id"]), None)
        if job is None or job.state != "RUNNING":
            return None
        return WorkerStep(
            job_id=job_id,
            rank=rank,
            slurm_id=state["slurm_id"],
            node=worker["node"],
            het_group=worker.get("het_group"),
            owner=RunAs(owner["uid"], owner["gid"], (), owner["name"]),
            env=state.get("envs", {}).get(str(rank), {}),
            working_dir=state.get("working_dir", ""),
        )

    def nodes(self) -> list[BackendNode]:
        switches = self._leaf_switches()
        return [_backend_node(node, switches.get(node.name, "")) for node in self._slurm_nodes()]

    def _leaf_switches(self) -> dict[str, str]:
        """Slurm's tree topology, read again once it is SWITCHES_EVERY seconds old."""
        read_at, switches = self._switches
        now = time.monotonic()
        if now - read_at >= SWITCHES_EVERY:
            switches = self.slurm.leaf_switches()
            self._switches = (now, switches)
        return switches

    def bad_nodes(self) -> dict[str, str]:
        """Nodes Slurm finds down or not responding: their workers are lost. (A drained
        node is not bad: it takes no new work, and what runs there finishes.)"""
        return {node.name: node.why_down() for node in self._slurm_nodes() if node.down}

    def cordon(self, node: str, cordoned: bool) -> None:
        """Drain the node in Slurm (what runs there finishes, nothing new starts; Trainyard
        counts it not ready), or resume it."""
        self.slurm.set_drained(node, cordoned, CORDON_REASON)

    # --- state -----------------------------------------------------------------------------

    def _report(
        self, state: dict[str, Any], job: SlurmJob | None, bad: dict[str, str]
    ) -> JobReport:
        stopping = state["stop_requested_at"] is not None
        workers = []
        for worker in state["workers"]:
            rank, node = worker["rank"], worker["node"]
            code = self._exit_code(state, rank)
            if code is not None:
                state_ = WorkerState.SUCCEEDED if code == 0 else WorkerState.FAILED
                why = (STOPPED if stopping else _timed_out(job)) if code else ""
                workers.append(WorkerReport(rank, state_, code, why))
            elif node in bad and (job is None or job.ended or job.state == "RUNNING"):
                workers.append(
                    WorkerReport(
                        rank,
                        WorkerState.FAILED,
                        None,
                        f"{NODE_UNHEALTHY}: node {node}: {bad[node]}",
                    )
                )
            elif job is not None and job.state == "NODE_FAIL":
                workers.append(WorkerReport(rank, WorkerState.FAILED, None, STOPPED))
            elif state.get("refused"):
                workers.append(WorkerReport(rank, WorkerState.FAILED, None, state["refused"]))
            elif job is not None and job.pending:
                resizing = " (resizing: the previous allocation ends first)" * bool(
                    state.get("retiring")
                )
                workers.append(
                    WorkerReport(rank, WorkerState.PENDING, None, f"Slurm: {job.reason}{resizing}")
                )
            elif job is not None and not job.ended and self._started(state, rank):
                workers.append(WorkerReport(rank, WorkerState.RUNNING))
            elif job is not None and not job.ended:
                workers.append(WorkerReport(rank, WorkerState.PENDING, None, "Starting"))
            elif stopping:
                killed = SIGKILL_EXIT if state["killed_at"] else SIGTERM_EXIT
                workers.append(WorkerReport(rank, WorkerState.FAILED, killed, STOPPED))
            else:
                why = _timed_out(job) or (
                    f"Slurm job {job.job_id}: {job.state} ({job.reason})"
                    if job
                    else (f"Slurm no longer knows job {state['slurm_id']}")
                )
                workers.append(WorkerReport(rank, WorkerState.FAILED, None, why))
        return JobReport(state["job_id"], state["attempt"], tuple(workers))

    def _exited_before_listed(self, state: dict[str, Any], job: SlurmJob) -> bool:
        """Whether a worker failed although the listing shows its allocation running, with
        no word of a time limit: the listing predates the exit."""
        if job.ended or _timed_out(job) or state["stop_requested_at"]:
            return False
        return any(self._exit_code(state, w["rank"]) not in (None, 0) for w in state["workers"])

    def _started(self, state: dict[str, Any], rank: int) -> bool:
        """Whether the worker's step has started its command on its node."""
        return (self._status_dir_of(state) / f"worker-{rank}.started").exists()

    def _exit_code(self, state: dict[str, Any], rank: int) -> int | None:
        path = self._status_dir_of(state) / f"worker-{rank}.exit"
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text().strip())
        return None

    def _kill_due(self, state: dict[str, Any]) -> bool:
        asked = state["stop_requested_at"]
        return asked is not None and time.time() >= asked + state["grace_seconds"]

    def _enforce_grace(self, state: dict[str, Any]) -> None:
        """Past the grace period, kill every process of the job, its batch script too."""
        if not self._kill_due(state) or state["killed_at"] is not None:
            return
        with contextlib.suppress(SlurmError):  # ended meanwhile
            self.slurm.signal(state["slurm_id"], "KILL", batch_too=True)
        state["killed_at"] = time.time()
        self._write_state(state)

    def _cancel(self, state: dict[str, Any]) -> None:
        """End the job in Slurm at once (found by name when its id was never recorded)."""
        slurm_id = state["slurm_id"]
        if slurm_id is None:
            name = slurm_name(state["job_id"], state["attempt"], state.get("round", 0))
            job = self._slurm_job_named(name)
            slurm_id = job.job_id if job else None
        retiring = [entry["slurm_id"] for entry in state.get("retiring", [])]
        for each in [slurm_id, *retiring] if slurm_id is not None else retiring:
            with contextlib.suppress(SlurmError):
                self.slurm.signal(each, "KILL", batch_too=True)
            with contextlib.suppress(SlurmError):  # ended meanwhile
                self.slurm.cancel(each)
        state["retiring"] = []
        state.pop("submission", None)
        state["killed_at"] = state["killed_at"] or time.time()
        if state["stop_requested_at"] is None:
            state["stop_requested_at"], state["grace_seconds"] = time.time(), 0.0
        self._write_state(state)

    def _slurm_nodes(self) -> list[SlurmNode]:
        return list(self._pinned_nodes) if self._pinned_nodes is not None else self.slurm.nodes()

    def _slurm_job(self, slurm_id: int) -> SlurmJob | None:
        return next((job for job in self.slurm.jobs() if job.job_id == slurm_id), None)

    def _slurm_job_named(self, name: str) -> SlurmJob | None:
        return next((job for job in self.slurm.jobs() if job.name == name and not job.ended), None)

    def _make_job_dirs(self, launch: JobLaunch, run_as: RunAs, status_dir: Path) -> None:
        """The backend's directory for the job (root's, passable); the job's working
        directory, its round's status directory and its logs (the owner's, 0700)."""
        job_dir = self._job_dir(launch.job_id)
        job_dir.mkdir(exist_ok=True)
        job_dir.chmod(TRAVERSABLE)
        owned = [self.log_dir / launch.job_id, status_dir]
        owned += [] if launch.working_dir else [job_dir / "work"]
        for directory in owned:
            directory.mkdir(mode=PRIVATE, exist_ok=True)
            os.chown(directory, run_as.uid, run_as.gid, follow_symlinks=False)
            directory.chmod(PRIVATE)

    def default_working_dir(self, job_id: str) -> str:
        return str(self._job_dir(job_id) / "work")

    def _job_dir(self, job_id: str) -> Path:
        return self.state_dir / job_id

    def _status_dir_of(self, state: dict[str, Any]) -> Path:
        """The status directory of the state's attempt, in its current round."""
        name = status_dir_name(state["attempt"], state.get("round", 0))
        return self._job_dir(state["job_id"]) / name

    def _read_state(self, job_id: str) -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            state: dict[str, Any] = json.loads((self._job_dir(job_id) / "state.json").read_text())
            return state
        return None

    def _write_state(self, state: dict[str, Any]) -> None:
        """Written whole, readable by root alone (it holds the workers' environments)."""
        self._live.before_state(state["job_id"])
        path = self._job_dir(state["job_id"]) / "state.json"
        temporary = path.with_suffix(".tmp")
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(json.dumps(state))
        temporary.replace(path)

    def _states(self) -> Iterator[dict[str, Any]]:
        """Every job this backend holds (``live_jobs``)."""
        for job_id in self._live.names():
            state = self._read_state(job_id)
            if state is not None:
                yield state


def _run_as(launch: JobLaunch) -> RunAs:
    """The owner's account; never root, never none."""
    run_as = launch.run_as
    if run_as is None:
        raise LaunchRefused(
            f"The owner of job {launch.job_id} ({launch.owner}) has no Unix account; "
            "jobs never run as root."
        )
    if run_as.uid == 0 or run_as.gid == 0:
        raise LaunchRefused(f"Job {launch.job_id} would run as root ({run_as.describe()}).")
    return run_as


def _timed_out(job: SlurmJob | None) -> str:
    """Why a worker ended when Slurm ended it at the allocation's time limit ("" else)."""
    # While Slurm ends it, squeue says COMPLETING, with the reason already TimeLimit.
    if job is not None and (job.state == "TIMEOUT" or job.reason == "TimeLimit"):
        return f"Slurm job {job.job_id} reached its time limit (the job's wall time)"
    return ""


def _workers(launch: JobLaunch, het_groups: dict[str, int]) -> list[dict[str, Any]]:
    return [
        {"rank": w.rank, "node": w.node, "het_group": het_groups.get(w.node)}
        for w in launch.workers
    ]


def _backend_node(node: SlurmNode, switch: str = "") -> BackendNode:
    gpu_type, gpus = node.gpus
    return BackendNode(
        name=node.name,
        gpu_type=gpu_type or "cpu",
        gpus=gpus,
        millicpus=node.cpus * 1000,
        memory=node.memory,
        labels={"slurm/address": node.address},
        ready=not (node.down or node.drained),
        switch=switch,
    )
