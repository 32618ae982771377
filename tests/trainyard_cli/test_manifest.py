"""The CLI's manifest and error wording, without a server."""

from __future__ import annotations

import pytest

from backend.jobs.api.serializers import JobSubmitSerializer
from trainyard_cli.client import BAD_INPUT, CliError, describe_errors
from trainyard_cli.jobs import build_submission, ssh_argv
from trainyard_cli.manifest import SUBMISSION_FIELDS, duration_seconds, read_manifest


def test_a_manifest_has_exactly_the_rest_submissions_fields():
    assert set(SUBMISSION_FIELDS) == set(JobSubmitSerializer().fields)


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        (3600, 3600),
        ("3600", 3600),
        ("90m", 5400),
        ("2h30m", 9000),
        ("2d", 172800),
        ("1d 2h", 93600),
    ],
)
def test_durations_read_as_people_write_them(written, seconds):
    assert duration_seconds(written) == seconds


@pytest.mark.parametrize("written", ["", "soon", "2 weeks", True, "-5"])
def test_a_duration_that_is_not_one_is_refused(written):
    with pytest.raises(CliError) as refused:
        duration_seconds(written)
    assert refused.value.exit_code == BAD_INPUT


def test_flags_override_the_manifest_and_a_command_may_be_argv(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "vc: vision\nworkers: 2\ncommand: [python, train.py, --lr, '0.1']\nenv: {A: '1'}\n"
    )

    assert read_manifest(path)["command"] == "python train.py --lr 0.1"
    body = build_submission(
        path, (), env=("B=2",), node_selector=(), workers=4, max_wall_time="1h", vc=None
    )
    assert body == {
        "vc": "vision", "workers": 4, "command": "python train.py --lr 0.1",
        "env": {"A": "1", "B": "2"}, "max_wall_time": 3600,
    }  # fmt: skip


def test_an_elastic_range_comes_from_the_manifest_or_the_flags(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("vc: vision\ncommand: torchrun train.py\nmin_workers: 2\nmax_workers: 4\n")

    assert read_manifest(path)["min_workers"] == 2
    body = build_submission(path, (), env=(), node_selector=(), max_workers=8, min_workers=None)
    assert (body["min_workers"], body["max_workers"]) == (2, 8)


def test_a_throughput_curve_comes_from_the_manifest_or_the_flags(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("vc: vision\ncommand: x\nthroughput: [100, 190]\nwork: 1000000\n")
    assert read_manifest(path)["throughput"] == [100, 190]
    body = build_submission(path, (), env=(), node_selector=(), throughput="100, 190, 270")
    assert (body["throughput"], body["work"]) == ([100.0, 190.0, 270.0], 1000000)
    with pytest.raises(CliError, match="--throughput: '100;190' is not a list of numbers"):
        build_submission(None, ("x",), env=(), node_selector=(), throughput="100;190")


def test_port_flags_expose_ports_over_the_manifest_s(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("vc: vision\ncommand: jupyter lab\nports: [{name: jupyter, port: 8000}]\n")

    body = build_submission(path, (), env=(), node_selector=(), ports=("jupyter=8888", "tb=6006"))

    assert body["ports"] == [{"name": "jupyter", "port": 8888}, {"name": "tb", "port": 6006}]
    with pytest.raises(CliError) as refused:
        build_submission(path, (), env=(), node_selector=(), ports=("jupyter=lab",))
    assert refused.value.exit_code == BAD_INPUT


def test_api_errors_read_field_by_field():
    body = {"workers": ["Too many."], "detail": "Please look.", "env": [{"KEY": ["Bad."]}]}

    assert describe_errors(body) == ["workers: Too many.", "Please look.", "env.KEY: Bad."]


def test_the_ssh_command_is_the_endpoints_then_the_users_arguments():
    argv = ssh_argv("ssh -p 2222 mia+k3m9@gateway", ("-L", "8888:localhost:8888"))

    assert argv == ["ssh", "-p", "2222", "mia+k3m9@gateway", "-L", "8888:localhost:8888"]
    with pytest.raises(CliError):
        ssh_argv("rm -rf /", ())


def test_whole_nodes_and_same_switch_come_from_the_manifest_or_the_flags(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("vc: vision\nworkers: 4\ncommand: torchrun train.py\nwhole_nodes: true\n")

    body = build_submission(path, (), env=(), node_selector=(), whole_nodes=None, same_switch=True)

    assert (body["whole_nodes"], body["same_switch"]) == (True, True)
    assert "same_switch" not in build_submission(
        path, (), env=(), node_selector=(), same_switch=None
    )
