"""The simulator with users: the Gen-Parallel-Workloads reader and fairness between users
(Jain's index), on traces small enough to work out by hand. No database."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobmanager.core.snapshot import Placement, Policy
from jobmanager.simulate import ClusterSpec, TraceError, load_gpw, measure, replay
from jobmanager.simulate.cli import main

HEADER = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\n"


def write_sample(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(f"{row}\n" for row in rows), encoding="utf-8")
    return path


def test_a_job_is_submitted_at_the_sum_of_the_intervals_and_cpu_only_jobs_are_skipped(
    tmp_path,
):
    sample = write_sample(
        tmp_path / "philly_data_training.csv",
        [
            "0,1,1,0,1,0,1389,0,Killed",
            "1,2,8,0,4,395,14405,0,Failed",  # 8 GPUs that Philly spread over 4 nodes
            "2,3,0,1,1,7,30,0,Pass",  # CPU only
            "3,2,16,0,2,0,50,0,Pass",
        ],
    )

    trace = load_gpw(sample)

    assert [(job.id, job.submitted, job.duration, job.gpus, job.user) for job in trace.jobs] == [
        ("philly_data_training/0", 0, 1389, 1, "u1"),
        ("philly_data_training/1", 395, 14405, 8, "u2"),
        # the skipped job's interval still counts: 395 + 7 + 0
        ("philly_data_training/3", 402, 50, 16, "u2"),
    ]
    assert trace.vcs == ["philly_data_training"]
    assert trace.skipped == 1


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["0,1,1,0,1,-5,10,0,Pass"], ":2: interval '-5' must be a finite number >= 0"),
        (["0,1,1,0,1,5,10,0"], ":2: expected 9 columns, found 8"),
        (["0,one,1,0,1,5,10,0,Pass"], ":2: user 'one' is not a whole number"),
    ],
)
def test_a_bad_sample_row_is_refused_with_the_line_at_fault(tmp_path, rows, message):
    sample = write_sample(tmp_path / "sample.csv", rows)
    with pytest.raises(TraceError, match=message):
        load_gpw(sample)


def test_a_file_of_another_format_is_refused_by_its_header(tmp_path):
    other = tmp_path / "cluster01.csv"
    other.write_text("job_id,submission_time,duration,num_gpu\n1,0,10,1\n", encoding="utf-8")
    with pytest.raises(TraceError, match="expected the header u_id,user,gpu_num"):
        load_gpw(other)


def test_jains_index_of_slowdown_and_time_queued_between_two_users(tmp_path):
    # One 8-GPU node, FIFO. u1's job takes the node from 0 to 100: it never waits and its
    # slowdown is 100/100 = 1. u2's job, submitted at 0 too, waits 100 s and runs 50 s:
    # JCT 150, slowdown 150/50 = 3. Jain's index (x1 + x2)^2 / (2 (x1^2 + x2^2)):
    # slowdowns (1 + 3)^2 / (2 (1 + 9)) = 16/20; waits (0 + 100)^2 / (2 (0 + 100^2)) = 1/2,
    # the index of one user taking all.
    sample = write_sample(
        tmp_path / "two_users.csv",
        ["0,1,8,0,1,0,100,0,Pass", "1,2,8,0,1,0,50,0,Pass"],
    )
    trace = load_gpw(sample)

    result = replay(trace, ClusterSpec(1), {"two_users": 8}, Policy.FIFO, Placement.PACK)
    metrics = measure(result)

    assert metrics.users == 2
    assert metrics.jain_slowdown == pytest.approx(16 / 20)
    assert metrics.jain_time_queued == pytest.approx(1 / 2)


def test_users_whose_jobs_fare_alike_have_an_index_of_one(tmp_path):
    # Two 8-GPU nodes: each user's job has a node of its own at once (slowdown 1, no wait).
    sample = write_sample(
        tmp_path / "alike.csv",
        ["0,1,8,0,1,0,100,0,Pass", "1,2,8,0,1,0,50,0,Pass"],
    )
    alike = measure(
        replay(load_gpw(sample), ClusterSpec(2), {"alike": 16}, Policy.FIFO, Placement.PACK)
    )
    assert (alike.jain_slowdown, alike.jain_time_queued) == (1.0, 1.0)


def test_the_command_line_replays_a_sample_and_shows_the_fairness_columns(tmp_path, capsys):
    sample = write_sample(
        tmp_path / "two_users.csv",
        ["0,1,8,0,1,0,100,0,Pass", "1,2,8,0,1,0,50,0,Pass"],
    )

    code = main(
        ["gpw", str(sample), "--nodes", "1", "--policies", "FIFO", "--placements", "pack",
         "--output", str(tmp_path / "out"), "--quiet"]
    )  # fmt: skip

    assert code == 0
    heading, fifo = capsys.readouterr().out.splitlines()
    assert "Jain slowdown" in heading and "Jain queued" in heading
    assert "0.800" in fifo.split() and "0.500" in fifo.split()
