"""The API's JSON parser, with a size limit (413) and a nesting limit (400).

A body larger than ``TRAINYARD_MAX_JSON_BYTES`` is refused before it is read whole; one
nested deeper than ``TRAINYARD_MAX_JSON_DEPTH`` (which Python's parser would meet with a
RecursionError, a few KB of brackets being enough) is refused as malformed.

It reads the request's stream itself: DRF hands a ``JSONParser`` the whole ``request.body``,
which Django refuses past ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB) with an HTML "Bad
Request (400)" before any parser could answer in JSON.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.settings import api_settings
from rest_framework.utils import json


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` deep (iteratively)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


class LimitedJSONParser(BaseParser):
    """JSON bodies up to TRAINYARD_MAX_JSON_BYTES (413 past it) nested at most
    TRAINYARD_MAX_JSON_DEPTH deep (400 past it)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = settings.TRAINYARD_MAX_JSON_BYTES
        too_large = RequestTooLarge(f"The request body is larger than {limit} bytes.")
        request = parser_context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise too_large
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise too_large
        depth = settings.TRAINYARD_MAX_JSON_DEPTH
        nested = ParseError(f"JSON parse error - nested deeper than {depth} levels.")
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.decode(body, encoding)
            parse_constant = json.strict_constant if api_settings.STRICT_JSON else None
            data = json.loads(text, parse_constant=parse_constant)
        except RecursionError as error:
            raise nested from error
        except ValueError as error:  # UnicodeDecodeError included
            raise ParseError(f"JSON parse error - {error}") from error
        if deeper_than(data, depth):
            raise nested
        return data
