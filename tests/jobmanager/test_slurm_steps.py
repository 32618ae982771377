"""A step into a running Slurm worker, as the gateway starts it: the owner's account,
the worker's node and component, and an environment that cannot steer srun."""

from __future__ import annotations

from jobmanager.backends import RunAs
from jobmanager.backends.slurm_steps import WorkerStep

OWNER = RunAs(61000, 61001, (), "ty-test-mia")


def a_step(het_group: int | None = None, env: dict[str, str] | None = None) -> WorkerStep:
    return WorkerStep("k3m9", 1, 42, "node2", het_group, OWNER, env or {}, "/work/k3m9")


def test_a_step_runs_as_the_owner_on_the_worker_s_node_by_absolute_paths():
    argv = a_step().argv(["/bin/sh", "-c", "id"])

    assert argv[0].startswith("/") and argv[0].endswith("/setpriv")
    assert argv[1:3] == ["--reuid=61000", "--regid=61001"]
    srun = argv.index("--") + 1
    assert argv[srun].startswith("/") and argv[srun].endswith("/srun")
    assert {"--jobid=42", "--overlap", "--nodelist=node2", "--chdir=/work/k3m9"} <= set(argv)
    assert argv[-4:] == ["--", "/bin/sh", "-c", "id"] and "--pty" not in argv


def test_a_worker_of_a_heterogeneous_job_is_reached_in_its_component_with_a_terminal():
    argv = a_step(het_group=1).argv(["/bin/bash", "-i"], pty=True)

    assert "--het-group=1" in argv and "--pty" in argv


def test_the_job_s_loader_and_slurm_variables_do_not_reach_srun():
    env = {"PATH": "/home/mia/bin", "LD_PRELOAD": "/home/mia/x.so", "GCONV_PATH": "/home/mia",
           "SLURM_JOB_ID": "7", "SLURM_CONF": "/home/mia/slurm.conf", "RANK": "1"}  # fmt: skip

    srun_env = a_step(env=env).environment("/etc/slurm/slurm.conf", {"TERM": "xterm"})

    assert srun_env == {
        "PATH": "/home/mia/bin",  # the step's; setpriv and srun are named by absolute paths
        "RANK": "1",
        "TERM": "xterm",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
    }
