"""Where the backends keep each job's logs: ``$TRAINYARD_LOG_DIR/<job id>/worker-<rank>.log``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

CHUNK = 64 * 1024


def job_log_dir(job_id: str) -> Path:
    return Path(settings.TRAINYARD_LOG_DIR) / job_id


def job_log_files(job_id: str) -> list[Path]:
    """The job's worker logs, rank 0 first."""
    directory = job_log_dir(job_id)
    if not directory.is_dir():
        return []

    def rank(path: Path) -> tuple[int, str]:
        suffix = path.stem.rsplit("-", 1)[-1]
        return (int(suffix) if suffix.isdigit() else 1 << 30, path.name)

    return sorted(directory.glob("*.log"), key=rank)


def stream_full_log(files: list[Path]) -> Iterator[bytes]:
    """All workers' logs, one after another, each under a header when there are several."""
    for path in files:
        if len(files) > 1:
            yield f"==> {path.name} <==\n".encode()
        with path.open("rb") as log:
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
    size = path.stat().st_size if path.exists() else 0
    if offset is None:
        offset = max(size - max_bytes, 0)
        from_line_start = offset > 0
    else:
        offset = min(offset, size)
        from_line_start = False
    if size == offset:
        return LogChunk("", offset, offset, size)
    with path.open("rb") as log:
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
