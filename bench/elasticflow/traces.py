"""The traces of ElasticFlow's figures that the bench runs, and where each comes from.

A trace is one of three kinds, none of them copied into the project:

- in the artifact's checkout (``ElasticFlow/traces_for_ElasticFlow/``): Figure 8(a)'s
  ``elasticVpollux_e.csv`` and Figure 8(b)'s ``philly_103959.csv``;
- in ``microsoft/elasticflow-traces`` (``data/elasticflow-traces.tar.gz``, unpacked into a
  temporary folder at run time): Figure 8(b)'s ``clusterNN.csv``;
- made by the artifact's own generator (``ElasticFlow/trace_generator/generate_trace.py``)
  with the arguments of the figure's ``run_figN.sh``. The generator draws deadlines and
  best-effort jobs from Python's unseeded global ``random``: the bench seeds it (0) before
  running the generator, so that every run replays the same jobs.

Each trace runs on the cluster and GPU profiles its figure's script gives it, with its
scheduling slot (the artifact's ``--scheduling_slot``; Trainyard passes at least as often).
"""

from __future__ import annotations

import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

ARTIFACT_TRACES = "ElasticFlow/traces_for_ElasticFlow"
GENERATOR_DIR = "ElasticFlow/trace_generator"
MICROSOFT_TARBALL = "data/elasticflow-traces.tar.gz"
# Runs the artifact's generator with Python's global random seeded (see the module docstring).
SEEDED_GENERATOR = (
    "import random, runpy, sys; random.seed(0); sys.argv = ['generate_trace.py', *sys.argv[1:]]; "
    "runpy.run_path('generate_trace.py', run_name='__main__')"
)


@dataclass(frozen=True)
class TraceSetup:
    """One trace of a figure, on the cluster its figure runs it on."""

    name: str
    figure: str
    source: str  # "artifact", "microsoft" or "generated"
    file: str  # a file name (artifact, microsoft) or the generator's arguments
    cluster_spec: str  # relative to the artifact's scheduler folder
    gpu_type: str  # the throughput profiles: T4 or A100
    slot: float  # seconds between the artifact's scheduling passes


SETUPS = {
    setup.name: setup
    for setup in (
        TraceSetup("fig8a", "Figure 8(a)", "artifact", "elasticVpollux_e.csv",
                   "cluster_specs/n16g4.csv", "T4", 60),
        TraceSetup("fig8b-cluster10", "Figure 8(b)", "microsoft", "cluster10.csv",
                   "cluster_specs/n32g8.csv", "A100", 60),
        TraceSetup("fig8b-philly", "Figure 8(b)", "artifact", "philly_103959.csv",
                   "cluster_specs/n32g8.csv", "A100", 60),
        TraceSetup("fig10", "Figure 10", "generated",
                   "--num_jobs=100 --lam=1500 --min_ddl=1.5 --seed=1",
                   "cluster_specs/n16g8.csv", "A100", 240),
        TraceSetup("fig11-be0.5", "Figure 11", "generated",
                   "--num_jobs=200 --lam=900 --best_effort_percentage=0.5",
                   "cluster_specs/n8g8.csv", "A100", 240),
    )
}  # fmt: skip


def trace_path(
    setup: TraceSetup, artifact: Path, artifact_python: str, microsoft: Path | None, scratch: Path
) -> Path:
    """The trace's CSV, unpacked or generated under ``scratch`` where it must be."""
    if setup.source == "artifact":
        return artifact / ARTIFACT_TRACES / setup.file
    if setup.source == "microsoft":
        if microsoft is None:
            raise SystemExit(
                f"{setup.name}: give --microsoft-traces (or $ELASTICFLOW_TRACES_DIR): a "
                "checkout of microsoft/elasticflow-traces"
            )
        unpacked = scratch / "microsoft"
        if not unpacked.exists():
            with tarfile.open(microsoft / MICROSOFT_TARBALL) as tarball:
                tarball.extractall(unpacked, filter="data")
        return unpacked / setup.file
    output = scratch / f"{setup.name}.csv"
    if not output.exists():
        done = subprocess.run(
            [artifact_python, "-c", SEEDED_GENERATOR, *setup.file.split(),
             f"--output_file={output}"],
            cwd=artifact / GENERATOR_DIR, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{setup.name}: the artifact's generator failed:\n{done.stderr}")
    return output
