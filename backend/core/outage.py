"""A database that cannot be reached answers 503 JSON with ``Retry-After``, never a 500.

Three places catch it, so that no path answers Django's HTML error page: the API's
exception handler (DRF views), ``DatabaseUnavailableMiddleware`` (plain Django views)
and ``server_error``, the project's 500 handler (what middleware raises).
"""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse

RETRY_AFTER_SECONDS = 5
UNAVAILABLE = "The database is unavailable; try again in a few seconds."


def is_database_outage(error: BaseException | None) -> bool:
    """A lost or refused connection, a server gone away, a lock wait timed out."""
    return isinstance(error, OperationalError | InterfaceError)


def database_unavailable() -> JsonResponse:
    response = JsonResponse({"detail": UNAVAILABLE}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    """Answers a plain Django view's database outage as 503 JSON."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception):
        return database_unavailable() if is_database_outage(exception) else None


def server_error(request: HttpRequest) -> JsonResponse:
    """The 500 handler: JSON, and a 503 when the cause is the database."""
    if is_database_outage(sys.exc_info()[1]):
        return database_unavailable()
    return JsonResponse({"detail": "Server error."}, status=500)
