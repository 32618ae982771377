"""What the conformance suite runs each backend with: one harness per backend.

A harness gives the backend, two nodes to place workers on, the account jobs run as, and
plays the part of the world where a backend needs one: the Kubernetes fake runs no
command, so its harness moves each pod as the command would have (starts, writes its
log, exits with its code, is gone after a stop); the local and Slurm backends run the
command for real and their harnesses play nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from jobmanager.backends import ClusterBackend, JobLaunch, RunAs, WorkerSpec
from tests.polling import wait_until

T = TypeVar("T")
ELASTIC_MEMORY_MIB = 1024  # a worker under torchrun's elastic agent


@dataclass(frozen=True)
class Work:
    """What every worker of a test job does: print a line naming itself, then exit with
    its rank's code, or (``exit_codes`` None) run until it is stopped."""

    exit_codes: tuple[int, ...] | None = None

    def line(self, rank: int) -> str:
        return f"hello from rank {rank}"

    @property
    def command(self) -> str:
        start = 'echo "hello from rank $RANK"; '
        if self.exit_codes is None:
            return start + "exec sleep 600"
        cases = " ".join(f"{rank}) exit {code};;" for rank, code in enumerate(self.exit_codes))
        return start + f"case $RANK in {cases} esac"


@dataclass
class Harness:
    """A backend under test, and how its world moves (for a fake)."""

    name: str
    backend: ClusterBackend
    nodes: tuple[str, str]
    account: RunAs
    log_dir: Path
    executes: bool  # runs commands for real
    kubernetes: Any = None  # the fake API server's test cluster (KubernetesTestCluster)
    slurm: Any = None  # the Slurm test cluster (SlurmCluster)
    launched: list[str] = field(default_factory=list)

    def launch(self, job_id: str, command: str, workers: int = 2, gpus: int = 1) -> JobLaunch:
        """A launch of ``workers`` workers, each on the next of the two nodes."""
        self.launched.append(job_id)
        return JobLaunch(
            job_id=job_id,
            attempt=1,
            name="conformance",
            owner=self.account.name,
            vc="vision",
            command=command,
            workers=tuple(
                WorkerSpec(rank, self.nodes[rank % 2], tuple(range(gpus)), 1000, 64)
                for rank in range(workers)
            ),
            run_as=self.account,
        )

    def play(self, launch: JobLaunch, work: Work) -> None:
        """For a fake: the workers start, write their line, and end as ``work`` says."""
        if self.kubernetes is None:
            return
        fake, namespace = self.kubernetes.fake, self.kubernetes.namespace
        for worker in launch.workers:
            pod = f"ty-{launch.job_id}-{launch.attempt}-{worker.rank}"
            fake.set_pod_phase(namespace, pod, "Running")
            fake.write_pod_log(namespace, pod, work.line(worker.rank) + "\n")
            if work.exit_codes is not None:
                code = work.exit_codes[worker.rank]
                fake.set_pod_phase(namespace, pod, "Succeeded" if code == 0 else "Failed", code)

    def elastic(self, launch: JobLaunch, min_workers: int, max_workers: int) -> JobLaunch:
        """The launch as an elastic job's: its workers run under torchrun, whose agent
        (a Python importing PyTorch) needs far more than a test worker's 64 MiB: under
        that limit the agents were killed for memory as they started, and never met."""
        workers = tuple(replace(w, memory=ELASTIC_MEMORY_MIB) for w in launch.workers)
        return replace(launch, workers=workers, min_workers=min_workers, max_workers=max_workers)

    def resize(self, launch: JobLaunch, grace_seconds: float, seconds: float) -> None:
        """Resize the deployed attempt to the launch's workers. For the fake, the kubelet
        ends the pods the resize deletes (the resize waits for them to be gone)."""
        if self.kubernetes is None:
            self.backend.resize(launch, grace_seconds)
            return
        raised: list[BaseException] = []

        def resize() -> None:
            try:
                self.backend.resize(launch, grace_seconds)
            except BaseException as error:  # handed to the test
                raised.append(error)

        thread = threading.Thread(target=resize, daemon=True)
        thread.start()
        fake, namespace = self.kubernetes.fake, self.kubernetes.namespace
        selector = f"trainyard.io/job={launch.job_id}"
        going = wait_until(
            lambda: (
                (pods := fake.list("pods", namespace, selector))
                and all(pod["metadata"].get("deletionTimestamp") for pod in pods)
                and pods
            ),
            seconds,
            "the resize deletes every pod",
        )
        for pod in going:
            fake.finish_deletion(namespace, pod["metadata"]["name"])
        thread.join(seconds)
        assert not thread.is_alive() and not raised, raised

    def play_stopped(self, launch: JobLaunch) -> None:
        """For a fake: the kubelet has ended the pods a stop deleted."""
        if self.kubernetes is None:
            return
        fake, namespace = self.kubernetes.fake, self.kubernetes.namespace
        for worker in launch.workers:
            fake.finish_deletion(namespace, f"ty-{launch.job_id}-{launch.attempt}-{worker.rank}")

    def log(self, job_id: str, rank: int) -> str:
        path = self.log_dir / job_id / f"worker-{rank}.log"
        return path.read_text() if path.exists() else ""

    def clean_up(self) -> None:
        for job_id in self.launched:
            self.backend.stop(job_id, 0)
            self.backend.remove(job_id)
