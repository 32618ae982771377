"""Sign-in throttling (django-axes): the ``TRAINYARD_LOGIN_FAILURE_LIMIT``-th wrong password
in a row for one username from one client address, and every sign-in after it of that
username from that address (even a right one), are answered 429 with a Retry-After, until
``TRAINYARD_LOGIN_COOLOFF_SECONDS`` pass without another failure. Other users signing in
from the same address (every tenant of a shared host is 127.0.0.1), and the same user from
elsewhere, are not held back. Only ``TRAINYARD_LOGIN_ADDRESS_FAILURE_LIMIT`` failures from
one address over all usernames (password spraying, far above one user's limit) lock the
address out for everyone. A right password before the limit clears that username's count
from that address. The API's sign-in, the browsable API's and the admin's are all covered:
axes watches Django's ``authenticate``, which each of them calls."""

from __future__ import annotations

import math

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse


class UserAndAddressHandler(AxesDatabaseHandler):
    """axes' database handler, counting per username and address (its lockout parameters),
    with a second, higher limit on one address's failures over all usernames."""

    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        """The failures that count against this sign-in: the username's from this address,
        or the limit itself once the address alone has reached its own."""
        failures: int = super().get_failures(request, credentials)
        if address_failures(request) >= settings.TRAINYARD_LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(failures, get_failure_limit(request, credentials))
        return failures


def address_failures(request: HttpRequest) -> int:
    """Failed sign-ins from the request's address within the cool-off, over all usernames."""
    recent = AccessAttempt.objects.filter(
        ip_address=request.axes_ip_address,  # type: ignore[attr-defined]
        attempt_time__gte=get_cool_off_threshold(request),
    )
    return recent.aggregate(total=Sum("failures_since_start"))["total"] or 0


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
