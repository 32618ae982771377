"""Readers for published GPU-cluster traces: Microsoft ITP CSV, Microsoft Philly JSON, and the
CSV samples of DIR-LAB's Gen-Parallel-Workloads (Philly and Helios, with users).

Every reader returns a :class:`Trace` in submission order, or raises :class:`TraceError`
with a one-line message that names the file and the row or job at fault.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TextIO

from jobmanager.simulate.trace import Trace, TraceError, TraceJob

ITP_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
GPW_COLUMNS = (
    "u_id", "user", "gpu_num", "cpu_num", "node_num", "interval", "run_time", "wall_time",
    "new_status",
)  # fmt: skip
PHILLY_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def load_itp(paths: Sequence[Path | str], limit: int | None = None) -> Trace:
    """Read ITP CSV files (``job_id,submission_time,duration,num_gpu``), one VC per file.

    Each file becomes a VC named after its stem (``cluster01``); job ids are prefixed with
    it, so that files may share ids. All files count time from the same collection start,
    so their jobs are merged by submission time. ``limit`` keeps the first N submissions
    of the merged trace. Jobs asking for no GPUs are skipped.
    """
    if not paths:
        raise TraceError("no ITP trace file given")
    stems = [Path(path).stem for path in paths]
    if len(set(stems)) != len(stems):
        raise TraceError(f"ITP files must have different names (one VC each): {stems}")
    jobs: list[TraceJob] = []
    skipped = 0
    for path in map(Path, paths):
        file_jobs, file_skipped = _read_itp_file(path)
        jobs.extend(file_jobs)
        skipped += file_skipped
    name = "+".join(stems)
    return Trace.of(name, jobs, skipped, limit)


def _read_itp_file(path: Path) -> tuple[list[TraceJob], int]:
    with _open(path) as source:
        try:
            return _parse_itp_rows(path, csv.reader(source))
        except (UnicodeDecodeError, csv.Error) as error:
            raise TraceError(f"{path}: not a readable CSV file: {error}") from None


def _parse_itp_rows(path: Path, reader: Iterator[list[str]]) -> tuple[list[TraceJob], int]:
    vc = path.stem
    jobs: list[TraceJob] = []
    skipped = 0
    header = next(reader, None)
    if header is None or tuple(column.strip() for column in header) != ITP_COLUMNS:
        raise TraceError(f"{path}: expected the header {','.join(ITP_COLUMNS)}, found {header!r}")
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(ITP_COLUMNS):
            raise TraceError(f"{path}:{line}: expected 4 columns, found {len(row)}: {row!r}")
        job_id, submitted, duration, gpus = (value.strip() for value in row)
        try:
            job = TraceJob(
                id=f"{vc}/{job_id}",
                vc=vc,
                submitted=_number(submitted, "submission_time"),
                duration=_number(duration, "duration"),
                gpus=_count(gpus, "num_gpu"),
            )
        except ValueError as error:
            raise TraceError(f"{path}:{line}: {error}") from None
        if job.gpus == 0:
            skipped += 1
            continue
        jobs.append(job)
    return jobs, skipped


def load_gpw(path: Path | str, limit: int | None = None) -> Trace:
    """Read a Gen-Parallel-Workloads CSV (``u_id,user,gpu_num,...,interval,run_time,...``).

    ``interval`` is the seconds since the previous job's submission (the first row's is 0),
    so a job is submitted at the sum of the intervals up to its row; ``run_time`` is its
    duration and ``user`` its user (named ``u<id>``). The samples name no VC: every job is
    in one VC named after the file's stem. ``node_num`` is not kept: the simulated cluster
    decides a job's nodes from its GPUs. Jobs asking for no GPUs (CPU-only jobs, about a
    quarter of Helios's sample) are skipped and counted, as the ITP reader does.
    """
    path = Path(path)
    with _open(path) as source:
        try:
            return _parse_gpw_rows(path, csv.reader(source), limit)
        except (UnicodeDecodeError, csv.Error) as error:
            raise TraceError(f"{path}: not a readable CSV file: {error}") from None


def _parse_gpw_rows(path: Path, reader: Iterator[list[str]], limit: int | None) -> Trace:
    vc = path.stem
    header = next(reader, None)
    if header is None or tuple(column.strip() for column in header) != GPW_COLUMNS:
        raise TraceError(f"{path}: expected the header {','.join(GPW_COLUMNS)}, found {header!r}")
    jobs: list[TraceJob] = []
    skipped = 0
    submitted = 0.0
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(GPW_COLUMNS):
            raise TraceError(
                f"{path}:{line}: expected {len(GPW_COLUMNS)} columns, found {len(row)}: {row!r}"
            )
        fields = dict(zip(GPW_COLUMNS, (value.strip() for value in row), strict=True))
        try:
            submitted += _number(fields["interval"], "interval")
            job = TraceJob(
                id=f"{vc}/{fields['u_id']}",
                vc=vc,
                submitted=submitted,
                duration=_number(fields["run_time"], "run_time"),
                gpus=_count(fields["gpu_num"], "gpu_num"),
                user=f"u{_count(fields['user'], 'user')}",
            )
        except ValueError as error:
            raise TraceError(f"{path}:{line}: {error}") from None
        if job.gpus == 0:
            skipped += 1
            continue
        jobs.append(job)
    return Trace.of(vc, jobs, skipped, limit)


def load_philly(path: Path | str, limit: int | None = None) -> Trace:
    """Read a Philly ``cluster_job_log`` (a JSON list of jobs).

    A job's GPUs are those of every node in the detail of its last attempt, and its
    duration runs from that attempt's start to its end; jobs with no attempt, without
    both times, with no GPUs or ending before they start are skipped (and counted).
    Submission times are made relative to the earliest one in the file.
    """
    path = Path(path)
    with _open(path) as source:
        try:
            entries = json.load(source)
        except json.JSONDecodeError as error:
            raise TraceError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(entries, list):
        raise TraceError(f"{path}: expected a JSON list of jobs, found {type(entries).__name__}")
    parsed: list[tuple[str, str, datetime, float, int, str]] = []
    skipped = 0
    for index, entry in enumerate(entries):
        try:
            job = _philly_job(entry)
        except (KeyError, TypeError, ValueError) as error:
            raise TraceError(f"{path}: job #{index}: {_describe(error)}") from None
        if job is None:
            skipped += 1
        else:
            parsed.append(job)
    if not parsed:
        return Trace(path.stem, (), skipped)
    origin = min(submitted for _, _, submitted, _, _, _ in parsed)
    jobs = [
        TraceJob(job_id, vc, (submitted - origin).total_seconds(), duration, gpus, user)
        for job_id, vc, submitted, duration, gpus, user in parsed
    ]
    return Trace.of(path.stem, jobs, skipped, limit)


def _philly_job(entry: object) -> tuple[str, str, datetime, float, int, str] | None:
    if not isinstance(entry, dict):
        raise TypeError(f"expected an object, found {type(entry).__name__}")
    job_id = str(entry["jobid"])
    vc = str(entry["vc"])
    submitted = _philly_time(entry["submitted_time"], "submitted_time")
    if submitted is None:
        raise ValueError("submitted_time is missing")
    attempts = entry.get("attempts") or []
    if not attempts:
        return None
    last = attempts[-1]
    started = _philly_time(last.get("start_time"), "start_time")
    ended = _philly_time(last.get("end_time"), "end_time")
    if started is None or ended is None or ended < started:
        return None
    gpus = sum(len(node.get("gpus") or []) for node in last.get("detail") or [])
    if gpus == 0:
        return None
    user = str(entry.get("user") or "")
    return job_id, vc, submitted, (ended - started).total_seconds(), gpus, user


def _philly_time(value: object, field: str) -> datetime | None:
    if value is None or value in ("", "None"):
        return None
    try:
        return datetime.strptime(str(value), PHILLY_TIME_FORMAT)
    except ValueError:
        raise ValueError(f"{field} {value!r} is not a time like 2017-10-03 02:40:57") from None


def _describe(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing field {error.args[0]!r}"
    return str(error)


def _open(path: Path) -> TextIO:
    try:
        return path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except OSError as error:
        raise TraceError(f"{path}: cannot be read: {error.strerror}") from None


def _number(value: str, column: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{column} {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{column} {value!r} must be a finite number >= 0")
    return number


def _count(value: str, column: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"{column} {value!r} is not a whole number") from None
    if count < 0:
        raise ValueError(f"{column} {value!r} must be >= 0")
    return count
