"""A job manifest: the REST submission's fields as YAML (``trainyard submit -f job.yaml``),
as FfDL's manifest and a Slurm batch script's header are for their tools.

    vc: vision
    name: resnet50
    gpu_type: A100
    workers: 2
    gpus_per_worker: 8
    image: nvcr.io/nvidia/pytorch:24.08-py3
    command: torchrun --nproc-per-node 8 train.py --epochs 90
    env: {NCCL_DEBUG: WARN}
    max_wall_time: 2d

Flags given with ``-f`` override the manifest's fields. A field the submission does not
have is an error here, before anything is sent, so that a typo is not silently dropped.
"""

from __future__ import annotations

import re
import shlex
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from trainyard_cli.client import BAD_INPUT, CliError

# The fields of POST /api/v1/jobs/ (backend.jobs.api.serializers.JobSubmitSerializer).
SUBMISSION_FIELDS = (
    "vc", "name", "type", "command", "image", "gpu_type", "workers", "min_workers",
    "max_workers", "gpus_per_worker", "cpus_per_worker", "memory_per_worker", "env",
    "working_dir", "data_path", "output_path", "node_selector", "whole_nodes", "same_switch",
    "ports", "preemptible", "priority", "max_retries", "retry_on", "max_wall_time", "array",
    "deadline", "throughput", "work",
)  # fmt: skip
_DURATION = re.compile(r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s?)?\s*$")


def duration_seconds(value: object, field: str = "max_wall_time") -> int:
    """Seconds from 3600, "3600", "90m", "2h30m" or "2d"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    found = _DURATION.match(str(value)) if isinstance(value, str) and value.strip() else None
    if found is None or not any(found.groups()):
        raise CliError(f"{field}: {value!r} is not a duration (3600, 90m, 2h30m, 2d)", BAD_INPUT)
    days, hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def throughput_values(value: str, field: str = "--throughput") -> list[float]:
    """A throughput curve from "100,190,270" (samples/s at 1, 2, 3 workers)."""
    try:
        return [float(part) for part in value.split(",")]
    except ValueError:
        raise CliError(
            f"{field}: {value!r} is not a list of numbers (100,190,270)", BAD_INPUT
        ) from None


def read_manifest(path: Path) -> dict[str, Any]:
    """The submission a manifest file describes; CliError(BAD_INPUT) saying what is wrong."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as error:
        raise CliError(f"{path}: {error.strerror}", BAD_INPUT) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CliError(f"{path}: not valid YAML: {error}", BAD_INPUT) from None
    if not isinstance(document, dict):
        raise CliError(f"{path}: expected a mapping of submission fields at the top", BAD_INPUT)
    unknown = sorted(str(key) for key in document if key not in SUBMISSION_FIELDS)
    if unknown:
        raise CliError(
            f"{path}: unknown field {', '.join(map(repr, unknown))} "
            f"(a submission has {', '.join(SUBMISSION_FIELDS)})",
            BAD_INPUT,
        )
    if "max_wall_time" in document:
        document["max_wall_time"] = duration_seconds(document["max_wall_time"])
    if isinstance(document.get("deadline"), (date, datetime)):  # YAML reads an unquoted time
        document["deadline"] = document["deadline"].isoformat()
    if isinstance(document.get("throughput"), str):  # "100, 190, 270" as on the command line
        document["throughput"] = throughput_values(document["throughput"], "throughput")
    if isinstance(document.get("command"), list):  # a command written as argv
        document["command"] = shlex.join(str(part) for part in document["command"])
    return document
