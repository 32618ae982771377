"""Database time per view: every query a request makes is timed (Django's execute
wrapper) and the total recorded under the view's name."""

from __future__ import annotations

import time

from django.db import connection

from backend.core.instruments import VIEW_DATABASE_SECONDS


class _QueryTimer:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started


class DatabaseTimeMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        timer = _QueryTimer()
        with connection.execute_wrapper(timer):
            response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        if match is not None:  # unresolved paths (404s) would make labels without bound
            VIEW_DATABASE_SECONDS.labels(view=match.view_name or "unnamed").observe(timer.seconds)
        return response
