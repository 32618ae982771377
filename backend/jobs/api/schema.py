"""The job status groups the backend names, published in the OpenAPI schema.

``ACTIVE_STATUSES``, ``PENDING_STATUSES`` and ``TERMINAL_STATUSES`` (``backend.jobs.models``)
become the enum components ``ActiveStatusEnum``, ``PendingStatusEnum`` and
``TerminalStatusEnum``, so that a client (the dashboard's generated types) groups statuses
as the backend does, and its type check fails when a group changes here.
"""

from __future__ import annotations

from typing import Any

from backend.jobs.models import ACTIVE_STATUSES, PENDING_STATUSES, TERMINAL_STATUSES

STATUS_GROUPS: dict[str, tuple[tuple[str, ...], str]] = {
    "ActiveStatusEnum": (ACTIVE_STATUSES, "ACTIVE_STATUSES: the job holds cluster resources."),
    "PendingStatusEnum": (PENDING_STATUSES, "PENDING_STATUSES: the job waits for resources."),
    "TerminalStatusEnum": (TERMINAL_STATUSES, "TERMINAL_STATUSES: the job is over."),
}


def add_job_status_groups(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook: the schema with the status groups among its
    components (kept in name order, as drf-spectacular writes them)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, (statuses, description) in STATUS_GROUPS.items():
        schemas[name] = {
            "enum": [str(status) for status in statuses],
            "type": "string",
            "description": description,
        }
    result["components"]["schemas"] = dict(sorted(schemas.items()))
    return result
