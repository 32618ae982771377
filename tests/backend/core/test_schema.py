"""The OpenAPI schema is valid and served, and so is its Swagger UI."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from backend.jobs.models import ACTIVE_STATUSES, PENDING_STATUSES, TERMINAL_STATUSES

pytestmark = pytest.mark.django_db


def test_the_schema_validates_without_warnings(tmp_path):
    # --fail-on-warn turns any schema warning (an unannotated view, a guessed type) into an error.
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"),
        stderr=io.StringIO(),
    )  # fmt: skip

    assert "/api/v1/vcs/{name}/quotas/" in (tmp_path / "schema.yaml").read_text()


@pytest.mark.parametrize(
    ("path", "methods"),
    [
        ("/api/v1/me/", {"get"}),
        ("/api/v1/me/tokens/", {"get", "post"}),
        ("/api/v1/me/tokens/{id}/", {"get", "delete"}),
        ("/api/v1/me/ssh-keys/", {"get", "post"}),
        ("/api/v1/me/allowed-ips/", {"get", "post"}),
        ("/api/v1/users/", {"get", "post"}),
        ("/api/v1/users/{username}/deactivate/", {"post"}),
        ("/api/v1/vcs/", {"get", "post"}),
        ("/api/v1/vcs/{name}/", {"get", "patch"}),
        ("/api/v1/vcs/{name}/quotas/", {"get", "put"}),
        ("/api/v1/vcs/{name}/members/", {"get", "post"}),
        ("/api/v1/vcs/{name}/members/{username}/", {"delete"}),
        ("/api/v1/gpu-types/", {"get", "post"}),
        ("/api/v1/nodes/{name}/cordon/", {"post"}),
        ("/api/v1/cluster/summary/", {"get"}),
    ],
)
def test_the_served_schema_describes_the_endpoints(anonymous, path, methods):
    response = anonymous.get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    assert set(response.json()["paths"][path]) >= methods


def test_the_docs_page_is_served(anonymous):
    response = anonymous.get("/api/docs/")

    assert response.status_code == 200
    assert b"swagger-ui" in response.content


@pytest.mark.parametrize(
    ("component", "statuses"),
    [
        ("ActiveStatusEnum", ACTIVE_STATUSES),
        ("PendingStatusEnum", PENDING_STATUSES),
        ("TerminalStatusEnum", TERMINAL_STATUSES),
    ],
)
def test_the_schema_groups_job_statuses_as_the_backend_does(anonymous, component, statuses):
    # The dashboard's status groups are typed from these components (src/jobStatuses.ts).
    response = anonymous.get("/api/schema/", {"format": "json"})

    schemas = response.json()["components"]["schemas"]
    assert schemas[component]["enum"] == list(statuses)
    assert set(schemas[component]["enum"]) <= set(schemas["JobStatusEnum"]["enum"])
