"""Where the backends keep each job's logs: ``$TRAINYARD_LOG_DIR/<job id>/worker-<rank>.log``.

The log directory belongs to the job's owner, so a job could put a link (to the portal's
secret key, say), a FIFO or a hard link where its log was: logs are opened without
following links and refused unless they are plain files with one name
(``confine.open_job_file``), and only ``worker-<rank>.log`` files are logs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from jobmanager.backends.confine import open_job_file

CHUNK = 64 * 1024
LOG_NAME = re.compile(r"worker-([0-9]+)\.log")


def job_log_dir(job_id: str) -> Path:
    return Path(settings.TRAINYARD_LOG_DIR) / job_id


def job_log_files(job_id: str) -> list[Path]:
    """The job's worker logs, rank 0 first."""
    directory = job_log_dir(job_id)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    ranked = sorted((int(match[1]), name) for name in names if (match := LOG_NAME.fullmatch(name)))
    return [directory / name for _, name in ranked]


def stream_full_log(files: list[Path]) -> Iterator[bytes]:
    """All workers' logs, one after another, each under a header when there are several;
    a log that is not a plain file is said to be unreadable rather than read."""
    for path in files:
        if len(files) > 1:
            yield f"==> {path.name} <==\n".encode()
        try:
            log = open_job_file(str(path))
        except OSError as error:
            yield f"(this log cannot be read: {error.strerror or error})\n".encode()
            continue
        with log:
            while chunk := log.read(CHUNK):
                yield chunk


@dataclass(frozen=True)
class LogChunk:
    text: str
    offset: int  # where this chunk starts in the file
    next_offset: int  # ask from here next time
    size: int  # the file's size now


def read_log_chunk(path: Path, offset: int | None, max_bytes: int) -> LogChunk:
    """Up to ``max_bytes`` of a worker's log from ``offset``; without an offset, its last
    ``max_bytes``, from the start of a line. Undecodable bytes are replaced, and a chunk
    never ends inside a UTF-8 character (the rest comes with the next one)."""
    try:
        log = open_job_file(str(path))
    except OSError:  # not there yet, or not a plain file: nothing to show
        return LogChunk("", offset or 0, offset or 0, 0)
    with log:
        size = os.fstat(log.fileno()).st_size
        if offset is None:
            offset = max(size - max_bytes, 0)
            from_line_start = offset > 0
        else:
            offset = min(offset, size)
            from_line_start = False
        if size == offset:
            return LogChunk("", offset, offset, size)
        log.seek(offset)
        data = log.read(max_bytes)
    if from_line_start and b"\n" in data:
        skipped = data.index(b"\n") + 1
        data, offset = data[skipped:], offset + skipped
    cut = _utf8_boundary(data)
    return LogChunk(data[:cut].decode("utf-8", "replace"), offset, offset + cut, size)


def _utf8_boundary(data: bytes) -> int:
    """The length of ``data`` without a UTF-8 character cut at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte or ASCII
            needed = (
                1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            )
            return len(data) - back if needed > back else len(data)
    return len(data)
