"""API tokens: shown once, stored as a digest, honoured until deleted; the issue_token command."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import call_command
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from backend.accounts.actions import TokenCache, token_cache
from backend.accounts.models import ApiToken
from tests.backend.resources import ANONYMOUS, ResourceTests
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
    assert token_client(plaintext).get(ME).status_code == 200  # its lookup is now cached

    deleted = world.client(world.member).delete(f"{TOKENS}{token_id}/")

    assert deleted.status_code == 204
    assert token_client(plaintext).get(ME).status_code == 401


def test_a_deactivated_users_token_fails(world):
    plaintext = create_token(world)
    assert token_client(plaintext).get(ME).status_code == 200  # its lookup is now cached
    world.member.is_active = False
    world.member.save()

    assert token_client(plaintext).get(ME).status_code == 401


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(token_cache, "clock", fake)
    token_cache.clear()
    return fake


def token_lookups(client: APIClient) -> int:
    """Asks for ME; how many queries read the token table."""
    with CaptureQueriesContext(connection) as captured:
        assert client.get(ME).status_code == 200
    return sum("accounts_apitoken" in query["sql"] for query in captured.captured_queries)


def test_a_token_is_looked_up_once_per_cache_period(world, clock, settings):
    settings.TRAINYARD_TOKEN_CACHE_SECONDS = 10
    client = token_client(create_token(world))
    assert client.get(ME).status_code == 200  # the first use also notes it as used

    cached = token_lookups(client)
    clock.now += 11
    expired = token_lookups(client)

    assert (cached, expired) == (0, 1)


def test_a_token_revoked_by_another_process_is_refused_once_the_cache_period_ends(
    world, clock, settings
):
    settings.TRAINYARD_TOKEN_CACHE_SECONDS = 10
    plaintext = create_token(world)
    client = token_client(plaintext)
    assert client.get(ME).status_code == 200
    # Another web process deletes it: no signal reaches this one.
    ApiToken.objects.filter(user=world.member)._raw_delete(ApiToken.objects.db)

    clock.now += 9
    assert client.get(ME).status_code == 200
    clock.now += 2
    assert client.get(ME).status_code == 401


def test_without_a_cache_period_every_request_looks_the_token_up(world, clock, settings):
    settings.TRAINYARD_TOKEN_CACHE_SECONDS = 0
    client = token_client(create_token(world))
    assert client.get(ME).status_code == 200

    assert (token_lookups(client), token_lookups(client)) == (1, 1)


def test_the_cache_holds_a_bounded_number_of_tokens(world):
    cache = TokenCache(size=2)
    for digest in ("a", "b", "c"):
        cache.put(digest, world.member, ttl=60)

    assert cache.get("a") is None
    assert cache.get("b") == world.member
    assert cache.get("c") == world.member


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


class TestTokensAreTheirOwners(ResourceTests):
    """Another user's token is not found (and stays); anonymous users cannot make one."""

    url = TOKENS
    expected = {
        "retrieve": {"member": 404},
        "delete": {"member": 404},
        "create": {ANONYMOUS: 401},
    }

    @pytest.fixture
    def resource(self, world):
        create_token(world, user=world.outsider)
        return ApiToken.objects.get(user=world.outsider)

    def body(self, action, token):
        return {"name": "x"} if action == "create" else None

    def check(self, action, role, user, response, token) -> None:
        assert ApiToken.objects.filter(id=token.id).exists()


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
