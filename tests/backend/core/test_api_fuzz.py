"""Fuzzing every operation of the OpenAPI schema: bad input answers 4xx, never a 500."""

from __future__ import annotations

import json

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, given, settings

from backend.accounts.actions import create_api_token
from backend.wsgi import application

pytestmark = pytest.mark.django_db

EXAMPLES = settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
# The schema exactly as /api/schema/?format=json serves it.
schema = schemathesis.openapi.from_dict(
    json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(public=True)))
)
# One pytest test per operation, named after it (schemathesis's own parametrize makes items
# that pytest-xdist runs as one, without its operations).
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.fixture(autouse=True)
def keep_test_connection():
    """As Django's test client does: a request must not close the test's DB connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def tokens(world) -> dict[str, str]:
    return {role: create_api_token(getattr(world, role), "fuzz")[1] for role in ("staff", "member")}


def call_as(case, token: str) -> None:
    response = case.call(app=application, headers={"Authorization": f"Token {token}"})
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text[:500]}"


def fuzz(operation, token: str) -> None:
    """Call ``operation`` with the examples Hypothesis draws from its schema."""

    @EXAMPLES
    @given(case=operation.as_strategy())
    def each_case(case) -> None:
        call_as(case, token)

    each_case()


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.label)
def test_cluster_admin_input_never_makes_a_server_error(operation, tokens):
    fuzz(operation, tokens["staff"])


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.label)
def test_member_input_never_makes_a_server_error(operation, tokens):
    fuzz(operation, tokens["member"])
