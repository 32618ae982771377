"""Sign-in throttling (django-axes): wrong passwords per username and client address lead to
429 with a Retry-After, for the API's sign-in and the admin's alike; one user's failures
never lock out another, and only a spray over many usernames locks out an address."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

LOGIN = "/api/v1/auth/login/"
LIMIT = 10  # TRAINYARD_LOGIN_FAILURE_LIMIT's default: the 10th failure locks
COOL_OFF = 900  # TRAINYARD_LOGIN_COOLOFF_SECONDS's default
ADDRESS_LIMIT = 100  # TRAINYARD_LOGIN_ADDRESS_FAILURE_LIMIT's default


def sign_in(username: str, password: str, address: str = "203.0.113.7"):
    return APIClient(REMOTE_ADDR=address).post(
        LOGIN, {"username": username, "password": password}, format="json"
    )


def test_forty_wrong_passwords_lock_the_user_out_even_with_the_right_one_then(world):
    answers = [sign_in("mia", f"guess-{n}").status_code for n in range(40)]

    assert answers == [400] * (LIMIT - 1) + [429] * (40 - LIMIT + 1)
    right = sign_in("mia", PASSWORD)
    assert right.status_code == 429
    assert right["Retry-After"] == str(COOL_OFF)
    assert right.json() == {"detail": "Too many failed sign-ins; try again in 15 minutes."}


def test_once_the_cool_off_has_passed_the_right_password_signs_in(world):
    for n in range(LIMIT):
        sign_in("mia", f"guess-{n}")
    assert sign_in("mia", PASSWORD).status_code == 429

    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(seconds=COOL_OFF + 1))

    signed_in = sign_in("mia", PASSWORD)
    assert signed_in.status_code == 200 and signed_in.json()["username"] == "mia"


def test_one_user_s_failures_never_lock_out_another_user_of_the_same_address(world):
    # Every tenant of a shared host signs in from 127.0.0.1.
    UserFactory(username="boss", is_staff=True, is_superuser=True)
    answers = [sign_in("mia", f"guess-{n}", address="127.0.0.1").status_code for n in range(LIMIT)]

    assert answers == [400] * (LIMIT - 1) + [429]
    assert sign_in("boss", PASSWORD, address="127.0.0.1").status_code == 200
    assert sign_in("vera", PASSWORD, address="127.0.0.1").status_code == 200
    locked = sign_in("mia", PASSWORD, address="127.0.0.1")
    assert locked.status_code == 429 and locked["Retry-After"] == str(COOL_OFF)


def test_a_user_locked_out_at_one_address_still_signs_in_from_another(world):
    for n in range(LIMIT):
        sign_in("mia", f"guess-{n}", address="192.0.2.1")

    assert sign_in("mia", PASSWORD, address="192.0.2.1").status_code == 429
    assert sign_in("mia", PASSWORD, address="192.0.2.200").status_code == 200


def test_a_spray_over_many_usernames_locks_the_address_out_far_above_one_user_s_limit(world):
    spray = "198.51.100.9"
    answers = [
        sign_in(f"user{n}", "guess", address=spray).status_code for n in range(ADDRESS_LIMIT)
    ]

    assert answers == [400] * (ADDRESS_LIMIT - 1) + [429]
    assert ADDRESS_LIMIT >= 10 * LIMIT
    locked = sign_in("vera", PASSWORD, address=spray)
    assert locked.status_code == 429 and locked["Retry-After"] == str(COOL_OFF)
    assert sign_in("vera", PASSWORD, address="203.0.113.50").status_code == 200


def test_the_admin_sign_in_is_throttled_too(world):
    UserFactory(username="boss", is_staff=True, is_superuser=True)
    browser = Client(REMOTE_ADDR="203.0.113.99")
    form = {"username": "boss", "password": "wrong", "next": "/admin/"}

    answers = [browser.post("/admin/login/", form).status_code for _ in range(LIMIT)]

    assert answers == [200] * (LIMIT - 1) + [429]  # the form again, with its error; then locked
    locked = browser.post("/admin/login/", form | {"password": PASSWORD})
    assert locked.status_code == 429 and locked["Retry-After"] == str(COOL_OFF)
    assert b"Too many failed sign-ins" in locked.content


def test_a_right_password_before_the_limit_starts_the_count_again(world):
    for n in range(LIMIT - 1):
        sign_in("mia", f"guess-{n}")
    assert sign_in("mia", PASSWORD).status_code == 200

    assert [sign_in("mia", "guess").status_code for _ in range(LIMIT - 1)] == [400] * (LIMIT - 1)
