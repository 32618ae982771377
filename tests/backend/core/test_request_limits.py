"""Hostile request bodies: deeply nested JSON and oversized bodies answer 4xx JSON."""

from __future__ import annotations

import json

import pytest

from tests.backend.jobs_support import JOBS

pytestmark = pytest.mark.django_db


def post_raw(world, body: bytes):
    return world.client(world.member).generic("POST", JOBS, body, content_type="application/json")


def test_json_nested_2000_deep_in_4_kb_answers_400_json(world):
    body = b"[" * 2000 + b"]" * 2000

    response = post_raw(world, body)

    assert response.status_code == 400
    assert "nested deeper than 32 levels" in response.json()["detail"]


def test_json_just_past_the_nesting_limit_answers_400_and_within_it_is_read(world, settings):
    settings.TRAINYARD_MAX_JSON_DEPTH = 4
    spec = {"vc": "vision", "gpu_type": "A100", "command": "true"}
    too_deep = spec | {"env": {"A": [[["x"]]]}}  # object, object, list, list, list: 5
    assert post_raw(world, json.dumps(too_deep).encode()).status_code == 400

    response = post_raw(world, json.dumps(spec | {"env": {"A": "x"}}).encode())
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize("megabytes", [3, 5])
def test_bodies_past_djangos_own_limit_answer_json(world, megabytes):
    # Django refuses bodies over 2.5 MB (DATA_UPLOAD_MAX_MEMORY_SIZE) with an HTML page.
    body = json.dumps({"vc": "vision", "command": "x" * megabytes * 1024 * 1024}).encode()

    response = post_raw(world, body)

    assert response["Content-Type"] == "application/json"
    if megabytes == 3:  # under the 4 MiB limit: read, and the field refused
        assert response.status_code == 400
        assert "at most 131,071 (128 KiB) can be run" in response.json()["command"][0]
    else:
        assert response.status_code == 413
        assert response.json() == {"detail": "The request body is larger than 4194304 bytes."}


def test_a_body_over_the_size_limit_answers_413_json(world, settings):
    settings.TRAINYARD_MAX_JSON_BYTES = 10_000
    body = json.dumps({"vc": "vision", "command": "x" * 20_000}).encode()

    response = post_raw(world, body)

    assert response.status_code == 413
    assert response.json() == {"detail": "The request body is larger than 10000 bytes."}
