"""Users, managed by cluster admins, and /me/: who I am and my VCs."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from backend.accounts.actions import create_api_token
from backend.jobs.models import Job
from tests.backend.resources import ANONYMOUS, ResourceTests
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

USERS = "/api/v1/users/"
ME = "/api/v1/me/"
User = get_user_model()


def test_a_cluster_admin_creates_a_user_who_can_log_in(world):
    response = world.client(world.staff).post(
        USERS,
        {"username": "nina", "email": "nina@example.com", "password": "violet-tangent-42"},
        format="json",
    )

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["username"], answer["is_active"], answer["is_staff"]) == ("nina", True, False)
    assert "password" not in answer
    signed_in = APIClient().post(
        "/api/v1/auth/login/", {"username": "nina", "password": "violet-tangent-42"}, format="json"
    )
    assert signed_in.status_code == 200, signed_in.content


def test_a_user_created_without_password_cannot_log_in_with_one(world):
    response = world.client(world.staff).post(USERS, {"username": "bot"}, format="json")

    assert response.status_code == 201, response.json()
    assert not User.objects.get(username="bot").has_usable_password()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"username": "nina", "password": "password"}, "password", "too common"),
        ({"username": "nina", "password": "83920174"}, "password", "entirely numeric"),
        ({"username": "nina", "password": "short"}, "password", "at least 8"),
        ({"username": "mia", "password": "violet-tangent-42"}, "username", "already exists"),
        ({"username": "nina", "email": "not-an-email"}, "email", "valid email"),
        ({"username": "bad name!"}, "username", "valid username"),
    ],
)
def test_bad_users_are_refused(world, body, field, message):
    response = world.client(world.staff).post(USERS, body, format="json")

    assert response.status_code == 400
    assert message in " ".join(response.json()[field])
    assert not User.objects.filter(username="nina").exists()


def test_cluster_admins_list_users(world):
    response = world.client(world.staff).get(USERS)

    usernames = [user["username"] for user in response.json()["results"]]
    assert response.status_code == 200
    assert usernames == ["mia", "otto", "root", "vera"]


def test_deactivated_users_lose_their_tokens_but_keep_their_jobs(world):
    _, plaintext = create_api_token(world.member, "laptop")
    job = JobFactory(owner=world.member, vc=world.vision, gpu_type=world.a100)

    response = world.client(world.staff).post(f"{USERS}mia/deactivate/")

    assert response.status_code == 200
    assert response.json()["is_active"] is False
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    assert client.get(ME).status_code == 401
    assert Job.objects.filter(pk=job.pk, owner=world.member).exists()
    inactive = world.client(world.staff).get(USERS, {"is_active": "false"}).json()["results"]
    assert [user["username"] for user in inactive] == ["mia"]


def test_deactivating_an_unknown_user_is_not_found(world):
    assert world.client(world.staff).post(f"{USERS}nobody/deactivate/").status_code == 404


class TestOnlyClusterAdminsManageUsers(ResourceTests):
    """A VC admin is refused, anonymous users are asked to sign in; no user changes."""

    url = USERS
    expected = {
        action: {"vc_admin": 403, ANONYMOUS: 401}
        for action in ("list", "create", "retrieve", "deactivate")
    }

    @pytest.fixture
    def resource(self, world):
        return world.member

    def detail_url(self, user) -> str:
        return f"{USERS}{user.username}/"

    def body(self, action, user):
        return {"username": "nina", "password": "violet-tangent-42"}

    def check(self, action, role, user, response, member) -> None:
        assert User.objects.get(username="mia").is_active
        assert not User.objects.filter(username="nina").exists()


def test_me_shows_my_vcs_and_roles(world):
    world.nlp.memberships.create(user=world.vc_admin, role="member")

    me = world.client(world.vc_admin).get(ME).json()

    assert (me["username"], me["is_cluster_admin"]) == ("vera", False)
    assert me["vcs"] == [{"name": "nlp", "role": "member"}, {"name": "vision", "role": "admin"}]


def test_me_says_who_is_a_cluster_admin(world):
    me = world.client(world.staff).get(ME).json()

    assert (me["username"], me["is_cluster_admin"], me["vcs"]) == ("root", True, [])


def test_me_needs_a_signed_in_user(anonymous):
    assert anonymous.get(ME).status_code == 401
