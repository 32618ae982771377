"""Where the backends keep each job's logs: ``$TRAINYARD_LOG_DIR/<job id>/worker-<rank>.log``."""

from __future__ import annotations

from collections.abc import Iterator
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
