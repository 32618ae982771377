"""The API's errors answer ``{"field": ["message"]}`` or ``{"detail": "message"}``, never a
bare 500 (DRF's ``EXCEPTION_HANDLER``)."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler

from backend.core.exceptions import ActionRefused
from backend.core.outage import RETRY_AFTER_SECONDS, UNAVAILABLE, is_database_outage

logger = logging.getLogger(__name__)


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's handler, plus Django validation errors as 400, refused actions as 409 and a
    database outage as 503 with Retry-After."""
    if is_database_outage(exc):
        logger.warning("database unavailable, answered 503: %s", exc)
        return Response(
            {"detail": UNAVAILABLE},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = ValidationError(detail)
    if isinstance(exc, ActionRefused):
        return Response({"detail": exc.message}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, IntegrityError):
        logger.warning("integrity error answered as 409: %s", exc)
        return Response(
            {"detail": "This conflicts with existing data; reload and try again."},
            status=status.HTTP_409_CONFLICT,
        )
    return exception_handler(exc, context)
