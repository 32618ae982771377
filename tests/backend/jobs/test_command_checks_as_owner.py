"""A submission whose command names a program its owner may not run is a 400 naming
``command``, checked as the owner (a real Unix account), not as the portal (root): the
portal's own interpreter under a private directory is the case a new user meets first."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.jobs import commands
from backend.jobs.commands import program_of
from backend.jobs.models import Job
from tests.backend.jobs_support import submit
from tests.unix_accounts import job_account, reachable_directory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def nothing_remembered() -> Iterator[None]:
    """Each test starts, and leaves, with no program remembered as runnable."""
    commands.forget_runnable_programs()
    yield
    commands.forget_runnable_programs()


@pytest.fixture
def private_python() -> Iterator[Path]:
    """An executable only root may reach, as the project's interpreter under /root is."""
    job_account("mia")
    with reachable_directory() as reachable:
        private = reachable / f"private-{secrets.token_hex(4)}"
        private.mkdir(mode=0o700)
        python = private / "python"
        python.write_text("#!/bin/sh\nexit 0\n")
        python.chmod(0o755)
        yield python


@pytest.fixture
def tools_on_path() -> Iterator[Path]:
    """A directory every account may read, with a program nobody may execute."""
    with reachable_directory() as tools:
        tools.chmod(0o755)
        (tools / "train-tool").write_text("#!/bin/sh\nexit 0\n")
        (tools / "train-tool").chmod(0o644)
        yield tools


@pytest.mark.parametrize("prefix", ["", "env ", "LR=0.1 ", "env OMP_NUM_THREADS=1 "])
def test_a_program_the_owner_may_not_reach_is_refused_in_plain_words(world, private_python, prefix):
    response = submit(world.client(world.member), command=f"{prefix}{private_python} train.py")

    errors = response.json()
    assert response.status_code == 400, errors
    assert errors == {
        "command": [
            f"The job runs as ty-test-mia, who may not run {private_python} (it is missing, "
            "or ty-test-mia may not execute it): use python (the training environment's, first on "
            "the job's PATH), /usr/bin/python3 or an image."
        ]
    }
    assert not Job.objects.exists()


def test_a_virtualenv_whose_interpreter_links_into_a_private_home_is_refused(world, private_python):
    with reachable_directory() as venv:
        (venv / "bin").mkdir(mode=0o755)
        (venv / "bin" / "python").symlink_to(private_python)

        response = submit(world.client(world.member), command=f"{venv}/bin/python train.py")

    assert response.status_code == 400, response.content
    assert response.json()["command"][0].startswith(
        f"The job runs as ty-test-mia, who may not run {venv}/bin/python "
    )


def test_a_program_found_on_the_job_s_path_must_be_executable(world, tools_on_path):
    client = world.client(world.member)

    response = submit(client, command="train-tool --epochs 1", env={"PATH": str(tools_on_path)})

    assert response.status_code == 400, response.content
    assert response.json()["command"][0].startswith(
        f"The job runs as ty-test-mia, who may not run {tools_on_path}/train-tool "
    )


def test_a_permission_fixed_after_a_refusal_is_seen_at_once(world, private_python):
    client = world.client(world.member)
    assert submit(client, command=f"{private_python} train.py").status_code == 400

    private_python.parent.chmod(0o755)

    response = submit(client, command=f"{private_python} train.py")
    assert response.status_code == 201, response.content


def test_a_burst_of_one_command_looks_its_program_up_once(world, tools_on_path, monkeypatch):
    """A sweep's submissions start one child as the owner, not one each."""
    lookups = []
    real_run = commands.subprocess.run

    def counted(argv, **kwargs):
        lookups.append(argv[-1])
        return real_run(argv, **kwargs)

    monkeypatch.setattr(commands.subprocess, "run", counted)
    (tools_on_path / "train-tool").chmod(0o755)
    client = world.client(world.member)
    env = {"PATH": str(tools_on_path)}

    for learning_rate in ("0.1", "0.01", "0.001"):
        response = submit(client, command=f"train-tool --lr {learning_rate}", env=env)
        assert response.status_code == 201, response.content
    submit(client, command="/usr/bin/python3 train.py")

    assert lookups == ["train-tool", "/usr/bin/python3"]


def test_the_refusal_comes_with_every_other_mistake_in_one_answer(world, private_python):
    response = submit(world.client(world.member), command=str(private_python), priority=99)

    assert response.status_code == 400, response.content
    assert sorted(response.json()) == ["command", "priority"]


@pytest.mark.parametrize(
    "command",
    [
        "/usr/bin/python3 -c 'print(1)'",
        "env LR=0.1 python3 -c 'print(1)'",
        "python train.py",  # on no PATH here: left to the job, as its working dir may hold it
        "./run.sh",
        "sh -c 'exec python3 train.py'",
    ],
)
def test_a_program_the_owner_may_run_or_a_command_too_complex_to_tell_is_accepted(world, command):
    job_account("mia")

    response = submit(world.client(world.member), command=command)

    assert response.status_code == 201, response.content


def test_a_pipeline_or_a_path_set_on_the_line_is_accepted_as_today(world, private_python):
    client = world.client(world.member)

    piped = submit(client, command=f"{private_python} train.py | tee log")
    own_path = submit(client, command=f"PATH={private_python.parent} python train.py")

    assert piped.status_code == 201, piped.content
    assert own_path.status_code == 201, own_path.content


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("python3 train.py", "python3"),
        ("env A=1 B='x y' /usr/bin/python3 -c 1", "/usr/bin/python3"),
        ("exec env A=1 /usr/bin/python3 -c 1", "/usr/bin/python3"),
        ("exec", None),
        ("cd work && python3 train.py", None),
        ("$HOME/venv/bin/python train.py", None),
        ("env -i python3", None),
        ("A=1", None),
        ("scripts/run.sh", None),
    ],
)
def test_the_program_of_a_command(command, program):
    assert program_of(command) == program
