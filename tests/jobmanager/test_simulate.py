"""The trace simulator: loaders, the event-driven replay on traces small enough to work out
by hand, and the command line end to end. No database."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from itertools import islice, product
from pathlib import Path

import pytest

from jobmanager.core.scheduler import schedule
from jobmanager.core.snapshot import Placement, Policy
from jobmanager.core.timeline import SimulatedCluster
from jobmanager.simulate import (
    ClusterSpec,
    SyntheticSpec,
    Trace,
    TraceError,
    TraceJob,
    generate,
    load_itp,
    load_philly,
    measure,
    nodes_for_load,
    replay,
    split_quotas,
)
from jobmanager.simulate.cli import main
from jobmanager.simulate.engine import ReplayOptions

ITP_DIR = Path("/work/shared/traces/itp")
CLUSTER01 = ITP_DIR / "cluster01.csv"
REPO_ROOT = Path(__file__).resolve().parents[2]

# A Philly cluster_job_log in miniature: a job with two attempts (the last one counts), a
# killed one, one never scheduled, one still running (no end time), and one that ran on
# no GPU.
PHILLY_LOG = [
    {
        "status": "Pass",
        "vc": "vc-a",
        "jobid": "application_1506638472019_10238",
        "attempts": [
            {
                "start_time": "2017-10-03 02:41:00",
                "end_time": "2017-10-03 03:41:00",
                "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]}],
            }
        ],
        "submitted_time": "2017-10-03 02:40:57",
        "user": "u1",
    },
    {
        "status": "Pass",
        "vc": "vc-b",
        "jobid": "application_1506638472019_10001",
        "attempts": [
            {
                "start_time": "2017-10-03 02:00:30",
                "end_time": "2017-10-03 02:05:00",
                "detail": [{"ip": "m2", "gpus": ["gpu0"]}],
            },
            {
                "start_time": "2017-10-03 02:10:00",
                "end_time": "2017-10-03 04:10:00",
                "detail": [
                    {"ip": "m3", "gpus": [f"gpu{index}" for index in range(8)]},
                    {"ip": "m4", "gpus": [f"gpu{index}" for index in range(8)]},
                ],
            },
        ],
        "submitted_time": "2017-10-03 02:00:00",
        "user": "u2",
    },
    {
        "status": "Killed",
        "vc": "vc-a",
        "jobid": "application_1506638472019_10300",
        "attempts": [
            {
                "start_time": "2017-10-03 05:00:00",
                "end_time": "2017-10-03 05:10:00",
                "detail": [{"ip": "m1", "gpus": ["gpu5"]}],
            }
        ],
        "submitted_time": "2017-10-03 04:59:00",
        "user": "u1",
    },
    {
        "status": "Killed",
        "vc": "vc-b",
        "jobid": "application_1506638472019_10400",
        "attempts": [],
        "submitted_time": "2017-10-03 06:00:00",
        "user": "u3",
    },
    {
        "status": "Running",
        "vc": "vc-a",
        "jobid": "application_1506638472019_10500",
        "attempts": [
            {
                "start_time": "2017-10-03 07:00:00",
                "end_time": None,
                "detail": [{"ip": "m1", "gpus": ["gpu0"]}],
            }
        ],
        "submitted_time": "2017-10-03 06:59:00",
        "user": "u1",
    },
    {
        "status": "Pass",
        "vc": "vc-c",
        "jobid": "application_1506638472019_10600",
        "attempts": [
            {
                "start_time": "2017-10-03 08:00:00",
                "end_time": "2017-10-03 08:30:00",
                "detail": [{"ip": "m5", "gpus": []}],
            }
        ],
        "submitted_time": "2017-10-03 07:59:00",
        "user": "u4",
    },
]


def trace_of(*jobs: tuple[str, str, float, float, int]) -> Trace:
    """A trace from (id, vc, submitted, duration, gpus) tuples."""
    return Trace.of("hand-made", [TraceJob(*job) for job in jobs])


def run(
    trace: Trace,
    cluster: ClusterSpec,
    policy: Policy = Policy.FIFO,
    placement: Placement = Placement.PACK,
    quotas: dict[str, int] | None = None,
):
    quotas = quotas or split_quotas(trace.gpu_seconds_by_vc(), cluster.gpus)
    return replay(trace, cluster, quotas, policy, placement)


def by_id(result, values: list) -> dict[str, object]:
    return dict(zip(result.job_ids, values, strict=True))


# --- loaders -----------------------------------------------------------------------------


def test_itp_loader_reads_the_first_jobs_of_the_real_trace():
    with CLUSTER01.open(newline="") as source:
        rows = list(islice(csv.DictReader(source), 200))

    trace = load_itp([CLUSTER01], limit=200)

    assert len(trace.jobs) == len(rows) == 200
    assert trace.vcs == ["cluster01"]
    assert sum(job.gpus for job in trace.jobs) == sum(int(row["num_gpu"]) for row in rows)
    assert trace.gpu_seconds == sum(int(row["num_gpu"]) * float(row["duration"]) for row in rows)
    assert [job.id for job in trace.jobs] == [f"cluster01/{row['job_id']}" for row in rows]
    assert trace.jobs[0].submitted == float(rows[0]["submission_time"])
    assert trace.span == float(rows[-1]["submission_time"]) - float(rows[0]["submission_time"])


def test_each_itp_file_becomes_a_vc_and_their_jobs_are_merged_in_time(tmp_path):
    paths = []
    for name in ("cluster01", "cluster05"):
        with (ITP_DIR / f"{name}.csv").open() as source:
            lines = list(islice(source, 31))  # header and 30 jobs
        path = tmp_path / f"{name}.csv"
        path.write_text("".join(lines))
        paths.append(path)

    trace = load_itp(paths)

    assert len(trace.jobs) == 60
    assert trace.vcs == ["cluster01", "cluster05"]
    assert sum(job.vc == "cluster05" for job in trace.jobs) == 30
    submitted = [job.submitted for job in trace.jobs]
    assert submitted == sorted(submitted)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("job,time\n", "expected the header job_id,submission_time,duration,num_gpu"),
        ("job_id,submission_time,duration,num_gpu\na,10,20,1\nb,11,x,1\n", "bad.csv:3: duration"),
        ("job_id,submission_time,duration,num_gpu\na,10,20\n", "bad.csv:2: expected 4 columns"),
        ("job_id,submission_time,duration,num_gpu\na,10,20,-1\n", "bad.csv:2: num_gpu"),
    ],
)
def test_a_bad_itp_file_is_refused_with_the_row_at_fault(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)

    with pytest.raises(TraceError, match=message):
        load_itp([path])


def test_philly_jobs_take_gpus_and_duration_from_their_last_attempt(tmp_path):
    path = tmp_path / "cluster_job_log.json"
    path.write_text(json.dumps(PHILLY_LOG))

    trace = load_philly(path)

    assert trace.skipped == 3  # no attempt, no end time, no GPU
    assert [(job.id, job.vc, job.submitted, job.duration, job.gpus) for job in trace.jobs] == [
        ("application_1506638472019_10001", "vc-b", 0.0, 2 * 3600.0, 16),
        ("application_1506638472019_10238", "vc-a", 40 * 60 + 57.0, 3600.0, 4),
        ("application_1506638472019_10300", "vc-a", 2 * 3600 + 59 * 60.0, 600.0, 1),
    ]
    assert load_philly(path, limit=1).jobs == trace.jobs[:1]


def test_a_philly_job_without_its_vc_is_refused(tmp_path):
    path = tmp_path / "log.json"
    path.write_text(json.dumps([{"jobid": "j1", "submitted_time": "2017-10-03 02:40:57"}]))

    with pytest.raises(TraceError, match="job #0: missing field 'vc'"):
        load_philly(path)


def test_the_synthetic_trace_is_the_same_for_the_same_seed():
    spec = SyntheticSpec(jobs=500, vcs=3, seed=7)

    trace = generate(spec)

    assert trace == generate(spec)
    assert trace.jobs != generate(SyntheticSpec(jobs=500, vcs=3, seed=8)).jobs
    assert len(trace.jobs) == 500
    assert trace.vcs == ["vc00", "vc01", "vc02"]
    assert {job.gpus for job in trace.jobs} <= {1, 2, 4, 8, 16, 32}
    one_gpu = sum(job.gpus == 1 for job in trace.jobs) / len(trace.jobs)
    assert 0.6 < one_gpu < 0.8


# --- sizing ------------------------------------------------------------------------------


def test_jobs_larger_than_a_node_become_gangs_of_whole_nodes():
    cluster = ClusterSpec(nodes=4, gpus_per_node=8)

    assert (cluster.shape(4).workers, cluster.shape(4).per_worker.gpus) == (1, 4)
    assert (cluster.shape(8).workers, cluster.shape(8).per_worker.gpus) == (1, 8)
    assert (cluster.shape(32).workers, cluster.shape(32).per_worker.gpus) == (4, 8)
    assert (cluster.shape(12).workers, cluster.shape(12).per_worker.gpus) == (2, 8)


def test_quotas_split_every_gpu_in_proportion_to_offered_load():
    quotas = split_quotas({"a": 300.0, "b": 100.0, "c": 100.0}, gpus=64)

    # 38.4, 12.8 and 12.8: 38, 12 and 12, and the two GPUs left go to the largest remainders
    assert quotas == {"a": 38, "b": 13, "c": 13}
    assert sum(quotas.values()) == 64


def test_target_load_sizes_the_cluster_to_the_offered_gpu_seconds():
    trace = load_itp([ITP_DIR / "cluster04.csv"], limit=3000)

    nodes = nodes_for_load(trace, 0.8)

    load_on = [trace.gpu_seconds / (count * 8 * trace.span) for count in (nodes, nodes - 1)]
    assert load_on[0] <= 0.8 < load_on[1]


# --- the engine --------------------------------------------------------------------------

# Two 4-GPU nodes. j1 and j2 fill them; j3 (8 GPUs, a gang over both nodes) must wait for
# both; j4 (2 GPUs) comes after j3.
TWO_NODES = ClusterSpec(nodes=2, gpus_per_node=4)
SMALL_TRACE = trace_of(
    ("j1", "vc", 0.0, 100.0, 4),
    ("j2", "vc", 10.0, 50.0, 4),
    ("j3", "vc", 20.0, 30.0, 8),
    ("j4", "vc", 30.0, 10.0, 2),
)


def test_fifo_keeps_the_small_job_behind_the_gang():
    result = run(SMALL_TRACE, TWO_NODES, Policy.FIFO)
    metrics = measure(result)

    # j3 starts when j1 ends (100) and ends at 130; j4 then runs 130-140.
    assert by_id(result, result.first_start) == {"j1": 0, "j2": 10, "j3": 100, "j4": 130}
    assert by_id(result, result.ended) == {"j1": 100, "j2": 60, "j3": 130, "j4": 140}
    assert metrics.avg_jct == (100 + 50 + 110 + 110) / 4
    assert metrics.avg_queue_delay == (0 + 0 + 80 + 100) / 4
    assert metrics.makespan == 140
    # 4*100 + 4*50 + 8*30 + 2*10 busy GPU-seconds of 8 GPUs over 140 s
    assert metrics.utilisation_makespan == pytest.approx(860 / (8 * 140))
    assert (metrics.completed, metrics.preemptions, metrics.queued_over_15min) == (4, 0, 0)


def test_runnable_first_lets_the_small_job_by():
    result = run(SMALL_TRACE, TWO_NODES, Policy.RF)
    metrics = measure(result)

    # j2 ends at 60: j3 still needs j1's node, so j4 runs 60-70 on j2's.
    assert by_id(result, result.first_start) == {"j1": 0, "j2": 10, "j3": 100, "j4": 60}
    assert metrics.avg_jct == (100 + 50 + 110 + 40) / 4
    assert metrics.makespan == 130
    assert metrics.utilisation_makespan == pytest.approx(860 / (8 * 130))


def test_a_borrower_is_preempted_for_its_lenders_job_and_runs_again_in_full():
    # VC b borrows VC a's node at 0; a's job at 10 preempts it, and it starts over at 60.
    trace = trace_of(
        ("b1", "b", 0.0, 100.0, 4),
        ("b2", "b", 0.0, 100.0, 4),
        ("a1", "a", 10.0, 50.0, 4),
    )

    result = run(trace, TWO_NODES, quotas={"a": 4, "b": 4})

    assert by_id(result, result.first_start) == {"b1": 0, "b2": 0, "a1": 10}
    assert by_id(result, result.ended) == {"b1": 100, "b2": 160, "a1": 60}
    assert by_id(result, result.starts) == {"b1": 1, "b2": 2, "a1": 1}
    metrics = measure(result)
    assert metrics.preemptions == 1
    # b2's first 10 s are busy too, though lost: 4*(100 + 10 + 100 + 50) of 8*160
    assert metrics.utilisation_makespan == pytest.approx(4 * 260 / (8 * 160))


def test_time_queued_counts_the_wait_after_a_preemption_and_restarts_cost_their_overhead():
    # As above: b2 runs 0-10, is preempted, waits 10-60 and runs again in full; with a
    # restart overhead of 5 s it holds its GPUs 5 s longer before it makes progress.
    trace = trace_of(
        ("b1", "b", 0.0, 100.0, 4),
        ("b2", "b", 0.0, 100.0, 4),
        ("a1", "a", 10.0, 50.0, 4),
    )
    quotas = {"a": 4, "b": 4}

    plain = measure(run(trace, TWO_NODES, quotas=quotas))
    result = replay(
        trace, TWO_NODES, quotas, Policy.FIFO, Placement.PACK,
        options=ReplayOptions(restart_overhead=5.0),
    )  # fmt: skip
    costly = measure(result)

    # The first waits are all 0 but a1's 0; b2 waited 50 s after its preemption.
    assert plain.max_queue_delay == 0 and plain.max_time_queued == 50
    assert plain.avg_time_queued == pytest.approx(50 / 3)
    assert by_id(result, result.ended) == {"b1": 100, "b2": 165, "a1": 60}
    assert costly.max_time_queued == 50  # the overhead is held GPUs, not queueing
    assert costly.lost_gpu_hours == pytest.approx(4 * 10 / 3600)


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize(("placement", "delay"), [(Placement.PACK, 0), (Placement.SPREAD, 999)])
def test_pack_keeps_a_node_whole_for_the_ffdl_gang(placement, delay, policy):
    # Four 4-GPU nodes, four 1-GPU jobs, then a 4-GPU job: packed, the small jobs share one
    # node; spread, they take one GPU on every node and the big job waits for them.
    cluster = ClusterSpec(nodes=4, gpus_per_node=4)
    trace = trace_of(
        *((f"small{index}", "vc", 0.0, 1000.0, 1) for index in range(4)),
        ("big", "vc", 1.0, 100.0, 4),
    )

    result = run(trace, cluster, policy, placement=placement)

    queue_delay = by_id(result, result.first_start)["big"] - 1.0
    assert queue_delay == delay


def test_every_job_of_a_busy_multi_vc_trace_completes_under_every_combination():
    trace = generate(SyntheticSpec(jobs=150, vcs=3, seed=3, mean_interarrival=30.0))
    cluster = ClusterSpec(nodes=6, gpus_per_node=8)
    durations = {job.id: job.duration for job in trace.jobs}
    preemptions = 0

    for policy, placement in product(Policy, Placement):
        result = run(trace, cluster, policy, placement)
        metrics = measure(result)

        assert metrics.completed == len(trace.jobs)
        assert 0 < metrics.utilisation_makespan <= 1
        assert sum(result.starts) - len(trace.jobs) == result.preemptions
        for job_id, submitted, ended in zip(
            result.job_ids, result.submitted, result.ended, strict=True
        ):
            assert ended - submitted >= durations[job_id] - 1e-6
        preemptions += result.preemptions
    assert preemptions > 0  # the VCs do lend and take back


def test_replays_keeping_free_capacity_decide_as_replays_rebuilding_it(monkeypatch):
    """The speed-up of keeping one free-capacity state between passes changes no decision
    (a busy trace, so that jobs wait, borrow and are preempted)."""
    trace = generate(SyntheticSpec(jobs=400, vcs=4, seed=5, mean_interarrival=20.0))
    cluster = ClusterSpec(nodes=8, gpus_per_node=8)
    kept = run(trace, cluster, Policy.RF, Placement.PACK)
    monkeypatch.setattr(SimulatedCluster, "schedule", lambda sim, now: schedule(sim.snapshot(now)))
    rebuilt = run(trace, cluster, Policy.RF, Placement.PACK)

    assert kept.preemptions > 0
    assert (kept.first_start, kept.ended, kept.starts, kept.passes) == (
        rebuilt.first_start,
        rebuilt.ended,
        rebuilt.starts,
        rebuilt.passes,
    )


def test_with_an_interval_the_scheduler_runs_only_at_its_multiples():
    quotas = split_quotas(SMALL_TRACE.gpu_seconds_by_vc(), TWO_NODES.gpus)

    result = replay(SMALL_TRACE, TWO_NODES, quotas, Policy.FIFO, Placement.PACK, interval=60.0)

    # j1 waits for the pass at 0, j2 for 60; j3 for the one after j1 ends (100): 120.
    assert by_id(result, result.first_start) == {"j1": 0, "j2": 60, "j3": 120, "j4": 180}
    assert result.passes == 4


def test_a_job_larger_than_the_cluster_is_left_out_and_reported():
    trace = trace_of(("fits", "vc", 0.0, 10.0, 8), ("too-big", "vc", 1.0, 10.0, 16))

    result = run(trace, TWO_NODES)

    assert result.unplaceable == ["too-big"]
    assert measure(result).completed == 1


# --- the command line --------------------------------------------------------------------


def test_the_command_line_compares_every_policy_and_placement_on_an_itp_slice(tmp_path):
    output = tmp_path / "out"

    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobmanager.simulate",
            "itp",
            str(CLUSTER01),
            "--limit",
            "150",
            "--compare",
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )

    assert completed.returncode == 0, completed.stderr
    expected = [
        (policy, placement)
        for policy in ("FIFO", "RF", "BF", "LAS", "FS")
        for placement in ("pack", "spread")
    ]
    for policy, placement in expected:
        assert f"{policy}+{placement}" in completed.stdout
    assert "util% window" in completed.stdout and "util% makespan" in completed.stdout
    with (output / "comparison.csv").open() as source:
        rows = list(csv.DictReader(source))
    assert [(row["policy"], row["placement"]) for row in rows] == expected
    assert {row["completed"] for row in rows} == {"150"}
    document = json.loads((output / "comparison.json").read_text())
    assert document["jobs"] == 150 and len(document["runs"]) == len(expected)
    png = (output / "comparison.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # One row per job and run: when it was submitted, started and ended, and its wait.
    with (output / "jobs-BF+pack.csv").open() as source:
        jobs = list(csv.DictReader(source))
    assert len(jobs) == 150
    for job in jobs:
        wait = float(job["first_start"]) - float(job["submitted"])
        assert float(job["wait"]) == pytest.approx(wait)
        assert float(job["ended"]) >= float(job["first_start"]) + float(job["duration"]) - 1e-6


def test_the_simulator_imports_no_django_celery_or_kubernetes():
    script = (
        "import sys, jobmanager.simulate.cli, jobmanager.simulate.report\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} "
        "& {'django', 'celery', 'kubernetes', 'rest_framework'}))"
    )

    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


def test_a_missing_trace_file_is_one_line_and_exit_code_2(tmp_path, capsys):
    code = main(["itp", str(tmp_path / "missing.csv"), "--output", str(tmp_path), "--quiet"])

    error = capsys.readouterr().err
    assert code == 2
    assert error.strip() == f"error: {tmp_path / 'missing.csv'}: no such file"


def test_a_bad_csv_row_is_one_line_and_exit_code_2(tmp_path, capsys):
    path = tmp_path / "broken.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\na,10,20,two\n")

    code = main(["itp", str(path), "--output", str(tmp_path / "out"), "--quiet"])

    error = capsys.readouterr().err
    assert code == 2
    assert error.strip() == f"error: {path}:2: num_gpu 'two' is not a whole number"
    assert not (tmp_path / "out").exists()


# --- network topology --------------------------------------------------------------------

THREE_NODES_TWO_SWITCHES = ClusterSpec(nodes=3, gpus_per_node=4, nodes_per_switch=2)
GANG_BEHIND_A_JOB = trace_of(("j1", "vc", 0.0, 100.0, 4), ("gang", "vc", 1.0, 100.0, 8))


def test_a_gang_spread_over_switches_runs_slower_and_the_replay_counts_it():
    options = ReplayOptions(straddle_slowdown=1.5)
    result = replay(
        GANG_BEHIND_A_JOB, THREE_NODES_TWO_SWITCHES, {"vc": 12}, Policy.FIFO, Placement.PACK,
        options=options,
    )  # fmt: skip

    # node1 (sw0) and node2 (sw1) are free at 1: it starts at once, 1.5 times slower.
    assert by_id(result, result.first_start) == {"j1": 0, "gang": 1}
    assert by_id(result, result.ended) == {"j1": 100, "gang": 151}
    metrics = measure(result)
    assert (metrics.straddled_starts, metrics.gang_starts) == (1, 1)


def test_a_gang_that_needs_one_switch_waits_for_it_and_runs_at_full_speed():
    options = ReplayOptions(straddle_slowdown=1.5, same_switch=True)
    result = replay(
        GANG_BEHIND_A_JOB, THREE_NODES_TWO_SWITCHES, {"vc": 12}, Policy.FIFO, Placement.PACK,
        options=options,
    )  # fmt: skip

    # It waits for j1 to leave sw0.
    assert by_id(result, result.ended) == {"j1": 100, "gang": 200}
    assert (result.straddled_starts, result.gang_starts) == (0, 1)


def test_placement_blind_to_switches_splits_a_gang_one_switch_could_hold():
    cluster = ClusterSpec(nodes=4, gpus_per_node=4, nodes_per_switch=2)
    # j1 takes node0 (sw0); the gang fits under sw1 but, blind, PACK takes node1 and node2.
    trace = trace_of(("j1", "vc", 0.0, 100.0, 4), ("gang", "vc", 1.0, 100.0, 8))
    for aware, split, ends in ((True, 0, 101), (False, 1, 151)):
        options = ReplayOptions(straddle_slowdown=1.5, topology_aware=aware)
        result = replay(trace, cluster, {"vc": 16}, Policy.FIFO, Placement.PACK, options=options)
        assert (result.straddled_starts, by_id(result, result.ended)["gang"]) == (split, ends)


def test_a_flat_network_splits_no_gang():
    result = run(GANG_BEHIND_A_JOB, ClusterSpec(nodes=3, gpus_per_node=4))
    assert (result.straddled_starts, result.gang_starts) == (0, 1)


def test_the_cli_replays_with_switches_and_reports_the_gangs_split(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nj1,0,100,4\ngang,1,100,8\n")
    code = main(
        [
            "itp", str(trace), "--nodes", "3", "--gpus-per-node", "4", "--nodes-per-switch",
            "2", "--straddle-slowdown", "1.5", "--policies", "FIFO", "--placements", "pack",
        ]
    )  # fmt: skip

    assert code == 0
    output = capsys.readouterr().out
    assert "gangs split" in output
    assert " 1/1 " in output
