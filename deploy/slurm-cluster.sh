#!/usr/bin/env bash
# A real multi-node Slurm cluster on this machine (tests/slurm_cluster.py): munged and
# slurmctld on the host, three slurmd each in a network namespace of its own on a bridge
# in 10.77.0.0/16, four fake GPUs per node. Needs root, and Slurm and munge from
# deploy/install-system-packages.sh.
#   deploy/slurm-cluster.sh up [DIR]    # prints the SLURM_CONF to export
#   deploy/slurm-cluster.sh down DIR
set -euo pipefail
cd "$(dirname "$0")/.."
python=".venv/bin/python"
[ -x "$python" ] || python=python3
exec "$python" -m tests.slurm_cluster "$@"
