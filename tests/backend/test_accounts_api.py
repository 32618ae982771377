"""API tokens: shown once, stored as a digest, honoured until deleted; the issue_token command."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import call_command
from django.forms.models import model_to_dict
from rest_framework.test import APIClient

from backend.accounts.models import ApiToken
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/me/tokens/"
ME = "/api/v1/me/"


def token_client(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    return client


def create_token(world, user=None, name: str = "laptop") -> str:
    response = world.client(user or world.member).post(TOKENS, {"name": name}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["token"]


def test_the_secret_is_answered_once_and_never_listed(world):
    client = world.client(world.member)

    created = client.post(TOKENS, {"name": "laptop"}, format="json").json()
    listed = client.get(TOKENS)
    detail = client.get(f"{TOKENS}{created['id']}/")

    assert created["token"].startswith(created["prefix"])
    assert created["name"] == "laptop"
    assert [item["name"] for item in listed.json()] == ["laptop"]
    for answer in (listed, detail):
        assert answer.status_code == 200
        assert created["token"] not in answer.content.decode()
    assert "token" not in detail.json()


def test_only_the_sha256_digest_is_stored(world):
    plaintext = create_token(world)

    stored = ApiToken.objects.get(user=world.member)

    assert stored.digest == hashlib.sha256(plaintext.encode()).hexdigest()
    assert all(plaintext not in str(value) for value in model_to_dict(stored).values())


def test_a_token_authenticates_a_request_and_is_noted_as_used(world):
    plaintext = create_token(world)

    response = token_client(plaintext).get(ME)

    assert response.status_code == 200
    assert response.json()["username"] == "mia"
    assert ApiToken.objects.get(user=world.member).last_used_at is not None


@pytest.mark.parametrize("header", ["Token ty_not-a-real-token", "Token", "Token a b"])
def test_a_bad_authorization_header_is_refused(world, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    assert client.get(ME).status_code == 401


def test_a_deleted_token_stops_working(world):
    plaintext = create_token(world)
    token_id = ApiToken.objects.get(user=world.member).id

    deleted = world.client(world.member).delete(f"{TOKENS}{token_id}/")

    assert deleted.status_code == 204
    assert token_client(plaintext).get(ME).status_code == 401


def test_a_deactivated_users_token_fails(world):
    plaintext = create_token(world)
    world.member.is_active = False
    world.member.save()

    assert token_client(plaintext).get(ME).status_code == 401


def test_a_token_name_is_unique_per_user(world):
    create_token(world, name="ci")

    again = world.client(world.member).post(TOKENS, {"name": "ci"}, format="json")
    elsewhere = world.client(world.outsider).post(TOKENS, {"name": "ci"}, format="json")

    assert again.status_code == 400
    assert "already have a token named 'ci'" in again.json()["name"][0]
    assert elsewhere.status_code == 201


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": "x" * 101}])
def test_a_token_needs_a_name(world, body):
    response = world.client(world.member).post(TOKENS, body, format="json")

    assert response.status_code == 400
    assert "name" in response.json()


@pytest.mark.parametrize("method", ["get", "delete"])
def test_another_users_token_is_not_found(world, method):
    create_token(world, user=world.outsider)
    token_id = ApiToken.objects.get(user=world.outsider).id

    response = getattr(world.client(world.member), method)(f"{TOKENS}{token_id}/")

    assert response.status_code == 404
    assert ApiToken.objects.filter(id=token_id).exists()


def test_anonymous_users_cannot_manage_tokens(anonymous):
    assert anonymous.post(TOKENS, {"name": "x"}, format="json").status_code == 401


def issue_token(*args: str) -> str:
    stdout = io.StringIO()
    call_command("issue_token", *args, stdout=stdout, stderr=io.StringIO())
    return stdout.getvalue().strip()


def test_issue_token_creates_the_user_and_prints_a_working_token(db):
    plaintext = issue_token("newbie")

    me = token_client(plaintext).get(ME).json()

    assert me["username"] == "newbie"
    assert me["is_cluster_admin"] is False


def test_issue_token_admin_makes_a_cluster_admin(db):
    plaintext = issue_token("boss", "--admin")

    client = token_client(plaintext)

    assert client.get(ME).json()["is_cluster_admin"] is True
    assert client.get("/api/v1/users/").status_code == 200


def test_issue_token_promotes_an_existing_user_and_keeps_their_other_tokens(db):
    UserFactory(username="ann")
    first = issue_token("ann")
    second = issue_token("ann", "--admin")

    assert first != second
    assert token_client(first).get(ME).json()["is_cluster_admin"] is True
    assert token_client(second).get(ME).status_code == 200
