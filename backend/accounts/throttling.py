"""Sign-in throttling (django-axes): the ``TRAINYARD_LOGIN_FAILURE_LIMIT``-th wrong password
in a row for one username, or from one client address, and every sign-in after it (even
a right one) are answered 429 with a Retry-After, until ``TRAINYARD_LOGIN_COOLOFF_SECONDS``
pass without another failure. A right password before that starts the count again. The
API's sign-in, the browsable API's and the admin's are all covered: axes watches Django's
``authenticate``, which each of them calls."""

from __future__ import annotations

import math

from axes.helpers import get_cool_off
from django.http import HttpRequest, HttpResponse, JsonResponse


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials=None
) -> HttpResponse:
    """429 with when to try again: JSON for the API, plain text for the admin's form."""
    cool_off = get_cool_off(request)
    seconds = math.ceil(cool_off.total_seconds()) if cool_off else 0
    wait = f"{math.ceil(seconds / 60)} minutes" if seconds >= 120 else f"{seconds} seconds"
    message = f"Too many failed sign-ins; try again in {wait}."
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": message}, status=429)
    else:
        response = HttpResponse(message, status=429, content_type="text/plain; charset=utf-8")
    if seconds:
        response["Retry-After"] = str(seconds)
    return response
