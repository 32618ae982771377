"""What is the Slurm backend's own (the conformance suite has what every backend shares),
on a real cluster of three nodes in network namespaces: the core's placement honoured
exactly, per node, in one allocation; the owner's account; drain and resume."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from jobmanager.backends import JobLaunch, LaunchRefused, RunAs, WorkerSpec, WorkerState
from jobmanager.backends.slurm import CORDON_REASON, SlurmBackend
from jobmanager.backends.slurm_commands import leaf_switch_records
from tests.polling import wait_until
from tests.unix_accounts import job_account, reachable_directory, require_root

SECONDS = 20.0


@pytest.fixture
def backend(slurm_cluster) -> Iterator[SlurmBackend]:
    require_root()
    with reachable_directory() as directory:
        backend = SlurmBackend(directory / "state", directory / "logs", str(slurm_cluster.conf))
        try:
            yield backend
        finally:
            for job_id in backend.reports():
                backend.stop(job_id, 0)
                backend.remove(job_id)


def a_launch(job_id: str, workers: tuple[WorkerSpec, ...], command: str) -> JobLaunch:
    account = job_account("conform")
    return JobLaunch(
        job_id=job_id, attempt=1, name="slurm", owner=account.name, vc="vision",
        command=command, workers=workers, run_as=account,
    )  # fmt: skip


def log(backend: SlurmBackend, job_id: str, rank: int) -> str:
    return (backend.log_dir / job_id / f"worker-{rank}.log").read_text()


def ended(backend: SlurmBackend, job_id: str):  # type: ignore[no-untyped-def]
    return wait_until(
        lambda: (r := backend.reports()[job_id]).ended and r, SECONDS, f"{job_id} ends"
    )


def test_each_worker_gets_exactly_its_node_and_its_number_of_gpus_as_its_owner(backend):
    workers = (
        WorkerSpec(0, "node1", (0,), 1000, 64),
        WorkerSpec(1, "node1", (1,), 1000, 64),
        WorkerSpec(2, "node3", (0, 1, 2), 1000, 64),
    )
    command = 'echo "$(hostname) $CUDA_VISIBLE_DEVICES $(id -un) local $LOCAL_RANK $(id -G)"'

    backend.deploy(a_launch("placed0001", workers, command))

    report = ended(backend, "placed0001")
    assert report.succeeded
    lines = [log(backend, "placed0001", rank).split() for rank in range(3)]
    assert [(line[0], len(line[1].split(","))) for line in lines] == [
        ("node1", 1), ("node1", 1), ("node3", 3)
    ]  # fmt: skip
    assert lines[0][1] != lines[1][1]  # the two workers on node1 hold different GPUs
    assert {line[2] for line in lines} == {"ty-test-conform"}
    assert [line[4] for line in lines] == ["0", "1", "0"]
    owner = job_account("conform")
    assert {tuple(line[5:]) for line in lines} == {(str(owner.gid),)}  # no root group


def test_no_worker_starts_until_every_node_of_the_gang_is_free(backend):
    busy = a_launch("busy000001", (WorkerSpec(0, "node2", (0, 1, 2, 3), 1000, 64),), "sleep 600")
    backend.deploy(busy)
    wait_until(lambda: backend.reports()["busy000001"].started, SECONDS, "node2 taken")
    gang = a_launch(
        "gang000001",
        (WorkerSpec(0, "node1", (0,), 1000, 64), WorkerSpec(1, "node2", (0,), 1000, 64)),
        "echo started",
    )

    backend.deploy(gang)

    workers = backend.reports()["gang000001"].workers
    assert [w.state for w in workers] == [WorkerState.PENDING] * 2  # not rank 0 alone
    backend.stop("busy000001", 0)
    assert ended(backend, "gang000001").succeeded


@pytest.mark.parametrize(
    "run_as", [None, RunAs(0, 0, (0,), "root", "/root")], ids=["no-account", "root"]
)
def test_a_launch_without_the_owner_s_account_or_as_root_is_refused(backend, run_as):
    launch = a_launch("refused001", (WorkerSpec(0, "node1", (), 1000, 64),), "true")

    with pytest.raises(LaunchRefused):
        backend.deploy(replace(launch, run_as=run_as))

    assert "refused001" not in backend.reports()


def test_cordon_drains_the_node_in_slurm_with_the_reason_and_uncordon_resumes_it(backend):
    running = a_launch(
        "drained001", (WorkerSpec(0, "node3", (0,), 1000, 64),), "sleep 3; echo finished"
    )
    backend.deploy(running)
    wait_until(lambda: backend.reports()["drained001"].started, SECONDS, "the worker starts")

    backend.cordon("node3", True)
    try:
        slurm_node = {n.name: n for n in backend.slurm.nodes()}["node3"]
        assert slurm_node.drained and slurm_node.reason == CORDON_REASON
        assert not {n.name: n for n in backend.nodes()}["node3"].ready  # nothing new there
        assert "node3" not in backend.bad_nodes()
        assert ended(backend, "drained001").succeeded  # what ran there finished
    finally:
        backend.cordon("node3", False)
    # resumed, Slurm pings the node again before it counts it as responding
    wait_until(lambda: {n.name: n for n in backend.nodes()}["node3"].ready, SECONDS, "ready")


def test_a_deploy_cut_short_after_sbatch_adopts_the_job_slurm_has_rather_than_submit_again(
    backend,
):
    launch = a_launch("crashed001", (WorkerSpec(0, "node1", (0,), 1000, 64),), "sleep 600")
    backend.deploy(launch)
    state_file = backend.state_dir / "crashed001" / "state.json"
    state = json.loads(state_file.read_text())
    submitted, state["slurm_id"] = state["slurm_id"], None  # as if it died before recording
    state_file.write_text(json.dumps(state))

    backend.deploy(launch)

    assert json.loads(state_file.read_text())["slurm_id"] == submitted
    named = [job for job in backend.slurm.jobs() if job.name == "ty-crashed001-a1"]
    assert [job.job_id for job in named] == [submitted]


def test_a_deploy_cut_short_before_sbatch_leaves_the_workers_environment_for_sessions(
    backend, monkeypatch
):
    launch = a_launch("cutshort01", (WorkerSpec(0, "node2", (0,), 1000, 64),), "sleep 600")

    def crash(*args: object) -> int:
        raise KeyboardInterrupt  # the portal dies as sbatch would run

    with monkeypatch.context() as patch:
        patch.setattr(backend.slurm, "submit", crash)
        with pytest.raises(KeyboardInterrupt):
            backend.deploy(launch)
    state = json.loads((backend.state_dir / "cutshort01" / "state.json").read_text())
    assert state["slurm_id"] is None  # nothing reached Slurm

    backend.deploy(launch)  # the job manager's next round

    wait_until(lambda: backend.reports()["cutshort01"].started, SECONDS, "the worker starts")
    step = backend.worker_step("cutshort01", 0)
    assert step is not None and step.node == "node2"
    assert step.env["MASTER_ADDR"] == {n.name: n for n in backend.slurm.nodes()}["node2"].address
    assert [job.name for job in backend.slurm.jobs()].count("ty-cutshort01-a1") == 1


def test_a_new_attempt_replaces_an_ended_one_not_yet_removed(backend):
    first = a_launch("again00001", (WorkerSpec(0, "node1", (0,), 1000, 64),), "exit 3")
    backend.deploy(first)
    assert ended(backend, "again00001").failed_worker is not None

    backend.deploy(replace(first, attempt=2, command="echo attempt $TRAINYARD_ATTEMPT"))

    report = ended(backend, "again00001")
    assert (report.attempt, report.succeeded) == (2, True)
    assert "attempt 2" in log(backend, "again00001", 0)


def test_slurm_s_time_limit_is_the_wall_time_left_with_room_for_the_portal_s_stop(backend):
    launch = a_launch("walltime01", (WorkerSpec(0, "node1", (0,), 1000, 64),), "sleep 600")

    backend.deploy(replace(launch, wall_time=150.0))  # + the 30 s grace: 3 minutes

    state = json.loads((backend.state_dir / "walltime01" / "state.json").read_text())
    jobs = json.loads(backend.slurm.run("squeue", "--json"))["jobs"]  # it ignores --jobs
    (job,) = [job for job in jobs if job["job_id"] == state["slurm_id"]]
    assert job["time_limit"] == 3  # minutes


def test_slurm_ends_a_job_past_its_wall_time_when_the_portal_does_not(backend):
    # Nothing here stops the job, as when the portal is down: Slurm's own limit ends it
    # (at its next check, every 30 s, past the minute).
    launch = a_launch("walltime02", (WorkerSpec(0, "node2", (0,), 1000, 64),), "sleep 600")
    backend.deploy(replace(launch, wall_time=1.0))
    wait_until(lambda: backend.reports()["walltime02"].started, SECONDS, "the worker starts")

    report = wait_until(
        lambda: (r := backend.reports()["walltime02"]).ended and r, 150.0, "Slurm ends it"
    )

    assert not report.succeeded
    assert "time limit" in report.workers[0].reason


def test_nodes_report_their_leaf_switch_from_slurm_s_tree_topology(backend, slurm_cluster):
    switches = {node.name: node.switch for node in backend.nodes()}

    # tests/slurm_cluster.py: the first two nodes under s0, the rest under s1.
    first, second, *rest = slurm_cluster.nodes
    assert switches == {first: "s0", second: "s0", **{node: "s1" for node in rest}}


def test_only_leaf_switches_of_slurm_s_topology_hold_nodes():
    text = (
        "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[1-2]\n"
        "SwitchName=top Level=1 LinkSpeed=1 Switches=s0\n"
    )
    assert leaf_switch_records(text) == {"s0": "node[1-2]"}
    assert leaf_switch_records("") == {}
