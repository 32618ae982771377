"""Elastic jobs (issue 34): the rules a job's worker range must follow, and the warning an
elastic job gets when its command shows no sign of checkpointing.

A leaf module (no models): the model, the serializers and the CLI's docs all read it.
"""

from __future__ import annotations

import re

# Words in a command or its environment that say the job saves and resumes its work:
# torchrun's elastic agent restarts workers in place, and the rest name a checkpoint.
_CHECKPOINTING = re.compile(r"checkpoint|ckpt|resume|torchrun|torch\.distributed\.run", re.I)

RESIZE_WITHOUT_CHECKPOINT = (
    "This job is elastic (min_workers < max_workers) but its command shows no "
    "checkpointing (no checkpoint, ckpt, resume or torchrun in the command or its "
    "environment): each resize restarts it from the beginning."
)


def worker_range_errors(workers: int, min_workers: int, max_workers: int) -> dict[str, list[str]]:
    """Every field the range breaks, each with its message (none when it holds)."""
    errors: dict[str, list[str]] = {}
    if min_workers > max_workers:
        message = f"min_workers ({min_workers}) is above max_workers ({max_workers})."
        errors["min_workers"] = [message]
        errors["max_workers"] = [message]
    elif not min_workers <= workers <= max_workers:
        errors["workers"] = [
            f"workers ({workers}) must lie within min_workers..max_workers "
            f"({min_workers}..{max_workers})."
        ]
    return errors


def resize_warning(command: str, env: dict[str, str], min_workers: int, max_workers: int) -> str:
    """What the job page says of an elastic job that seems not to checkpoint, or ''."""
    if min_workers >= max_workers:
        return ""
    said = " ".join([command, *env.keys(), *env.values()])
    return "" if _CHECKPOINTING.search(said) else RESIZE_WITHOUT_CHECKPOINT
