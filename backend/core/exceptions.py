"""The exceptions of the actions, which the API answers in its error format
(``backend/core/exception_handler.py``); apart from it, so that the actions load without
the REST framework (a Celery worker uses them, and no view)."""

from __future__ import annotations


class ActionRefused(Exception):
    """An action that the current state of an object does not allow (answers 409)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
