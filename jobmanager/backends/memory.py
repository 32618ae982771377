"""A backend that runs nothing: jobs live in a table, and a test decides when they end.

The table is kept in this process, or, given a path, in a JSON file under an exclusive
lock, so that a test and real Celery worker processes share one backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jobmanager.backends.base import (
    BackendNode,
    ClusterBackend,
    DeployError,
    Isolation,
    JobLaunch,
    JobReport,
    WorkerReport,
    WorkerState,
)

SIGTERM_EXIT = 143  # 128 + SIGTERM, as a shell reports a process stopped by it


class MemoryBackend(ClusterBackend):
    name = "memory"
    resizes = True

    def __init__(
        self,
        nodes: list[BackendNode] | None = None,
        state_path: Path | str | None = None,
        log_dir: Path | str | None = None,
        stop_at_once: bool = True,
    ) -> None:
        self.state_path = Path(state_path) if state_path else None
        self.log_dir = Path(log_dir) if log_dir else None
        self._memory: dict[str, Any] = {
            "jobs": {},
            "nodes": [],
            "fail_next_deploys": 0,
            "deploys": [],
        }
        with self._state() as state:
            state.setdefault("stop_at_once", stop_at_once)
            if nodes is not None:
                state["nodes"] = [asdict(node) for node in nodes]

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        if self.state_path is None:
            yield self._memory
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.state_path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                text = self.state_path.read_text() if self.state_path.exists() else ""
                state = (
                    json.loads(text)
                    if text
                    else {"jobs": {}, "nodes": [], "fail_next_deploys": 0, "deploys": []}
                )
                yield state
                self.state_path.write_text(json.dumps(state))
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # --- the interface ---------------------------------------------------------------------

    def isolation(self, launch: JobLaunch) -> Isolation:
        return Isolation(run_as="nobody: the memory backend runs no process", limits="none")

    def deploy(self, launch: JobLaunch) -> None:
        with self._state() as state:
            known = state["jobs"].get(launch.job_id)
            if known is not None and known["attempt"] == launch.attempt:
                return
            state["deploys"].append([launch.job_id, launch.attempt])
            failing = state["fail_next_deploys"] > 0
            if failing:  # raised once the state is written (a shared file's too)
                state["fail_next_deploys"] -= 1
            else:
                state["jobs"][launch.job_id] = {
                    "attempt": launch.attempt,
                    "workers": [
                        {"rank": w.rank, "node": w.node, "gpus": list(w.gpus), "state": "running"}
                        for w in launch.workers
                    ],
                    "env": launch.env,
                    "stopping": False,
                }
        if failing:
            raise DeployError(f"injected failure deploying {launch.job_id}")

    def resize(self, launch: JobLaunch, grace_seconds: float) -> None:
        with self._state() as state:
            job = state["jobs"].get(launch.job_id)
            if job is None or job["attempt"] != launch.attempt:
                return
            held = {worker["rank"]: worker for worker in job["workers"]}
            job["workers"] = [
                held.get(w.rank)
                or {"rank": w.rank, "node": w.node, "gpus": list(w.gpus), "state": "running"}
                for w in launch.workers
            ]
            job["env"] = launch.env

    def stop(self, job_id: str, grace_seconds: float) -> None:
        with self._state() as state:
            job = state["jobs"].get(job_id)
            if job is None:
                return
            job["stopping"] = True
            if state["stop_at_once"]:
                _end_running_workers(job, SIGTERM_EXIT)

    def reports(self) -> dict[str, JobReport]:
        with self._state() as state:
            return {job_id: _report(job_id, job) for job_id, job in state["jobs"].items()}

    def remove(self, job_id: str) -> None:
        with self._state() as state:
            state["jobs"].pop(job_id, None)

    def nodes(self) -> list[BackendNode]:
        with self._state() as state:
            return [BackendNode(**node) for node in state["nodes"]]

    # --- what a test decides ---------------------------------------------------------------

    def finish(
        self, job_id: str, exit_code: int = 0, log: str = "", rank: int | None = None
    ) -> None:
        """End the job's workers (or one of them) with an exit code, writing ``log``."""
        with self._state() as state:
            job = state["jobs"][job_id]
            for worker in job["workers"]:
                if rank is None or worker["rank"] == rank:
                    worker["state"] = "succeeded" if exit_code == 0 else "failed"
                    worker["exit_code"] = exit_code
                    if log:
                        self._write_log(job_id, worker["rank"], log)

    def finish_stopping(self, job_id: str) -> None:
        """Workers asked to stop (without ``stop_at_once``) are gone now."""
        with self._state() as state:
            _end_running_workers(state["jobs"][job_id], SIGTERM_EXIT)

    def lose(self, job_id: str) -> None:
        """The job vanishes, as when its node dies."""
        self.remove(job_id)

    def fail_next_deploys(self, count: int = 1) -> None:
        with self._state() as state:
            state["fail_next_deploys"] = count

    def deployed(self) -> dict[str, dict[str, Any]]:
        """The jobs held now, with their workers' nodes and GPUs."""
        with self._state() as state:
            jobs: dict[str, dict[str, Any]] = json.loads(json.dumps(state["jobs"]))
            return jobs

    def deploy_calls(self) -> list[tuple[str, int]]:
        with self._state() as state:
            return [tuple(call) for call in state["deploys"]]

    def _write_log(self, job_id: str, rank: int, text: str) -> None:
        if self.log_dir is None:
            return
        path = self.log_dir / job_id / f"worker-{rank}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as log:
            log.write(text)


def _end_running_workers(job: dict[str, Any], exit_code: int) -> None:
    for worker in job["workers"]:
        if worker["state"] in ("running", "pending"):
            worker["state"] = "failed"
            worker["exit_code"] = exit_code


def _report(job_id: str, job: dict[str, Any]) -> JobReport:
    return JobReport(
        job_id=job_id,
        attempt=job["attempt"],
        workers=tuple(
            WorkerReport(worker["rank"], WorkerState(worker["state"]), worker.get("exit_code"))
            for worker in job["workers"]
        ),
    )
