"""What the dashboard needs from Django: JSON sign-in and sign-out on a session, and its
page served for `/` and for every client route (without shadowing the API)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

LOGIN = "/api/v1/auth/login/"
LOGOUT = "/api/v1/auth/logout/"


def test_sign_in_answers_who_i_am_and_the_session_then_reaches_the_api(world):
    browser = Client(enforce_csrf_checks=True)
    response = browser.post(
        LOGIN, {"username": "vera", "password": PASSWORD}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["username"] == "vera"
    assert response.json()["vcs"] == [{"name": "vision", "role": "admin"}]
    assert browser.get("/api/v1/me/").json()["username"] == "vera"


def test_the_session_says_who_is_signed_in_and_answers_200_when_nobody_is(world):
    browser = Client()
    assert browser.get("/api/v1/auth/session/").json() == {"me": None}
    browser.force_login(world.vc_admin)
    assert browser.get("/api/v1/auth/session/").json()["me"]["username"] == "vera"


def test_a_wrong_password_is_a_400_that_says_so_and_signs_nobody_in(world):
    browser = Client()
    response = browser.post(
        LOGIN, {"username": "vera", "password": "nope"}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "Wrong username or password" in response.json()["detail"]
    assert browser.get("/api/v1/me/").status_code == 401


def test_a_sign_in_without_fields_names_them(world):
    response = Client().post(LOGIN, {}, content_type="application/json")
    assert response.status_code == 400
    assert set(response.json()) == {"username", "password"}


def test_a_deactivated_user_cannot_sign_in(world):
    world.member.is_active = False
    world.member.save()
    response = Client().post(
        LOGIN, {"username": "mia", "password": PASSWORD}, content_type="application/json"
    )
    assert response.status_code == 400


def test_sign_out_ends_the_session_and_needs_the_csrf_token(world):
    browser = Client(enforce_csrf_checks=True)
    browser.post(LOGIN, {"username": "mia", "password": PASSWORD}, content_type="application/json")
    assert browser.post(LOGOUT).status_code == 403  # no CSRF token: refused, still signed in
    assert browser.get("/api/v1/me/").status_code == 200
    token = browser.cookies["csrftoken"].value
    assert browser.post(LOGOUT, headers={"X-CSRFToken": token}).status_code == 204
    assert browser.get("/api/v1/me/").status_code == 401


@pytest.fixture
def built_dashboard(settings, tmp_path):
    (tmp_path / "index.html").write_text("<!doctype html><div id=root></div>")
    settings.DASHBOARD_BUILD_DIR = tmp_path


@pytest.mark.parametrize(
    "path", ["/", "/jobs", "/jobs/abc123", "/vcs/vision/settings", "/me/ssh-keys"]
)
def test_the_dashboard_page_is_served_for_its_routes_with_a_csrf_cookie(built_dashboard, path):
    response = Client().get(path)
    assert response.status_code == 200
    assert b"<div id=root></div>" in response.content
    assert "csrftoken" in response.cookies
    assert "no-cache" in response["Cache-Control"]


def test_the_dashboard_does_not_shadow_the_api_admin_or_health(built_dashboard, world):
    browser = Client()
    assert browser.get("/api/v1/jobs/").status_code == 401
    assert browser.get("/api/v1/no-such-thing/").status_code == 404
    assert browser.get("/healthz").json() == {"status": "ok"}
    assert browser.get("/admin/").status_code == 302


def test_an_unknown_page_answers_the_dashboard_with_404_and_the_api_json(built_dashboard):
    browser = Client()

    page = browser.get("/no/such/page")

    assert page.status_code == 404
    assert page["Content-Type"] == "text/html; charset=utf-8"
    assert page.content == browser.get("/jobs").content  # its router says "Page not found"
    missing = browser.get("/api/v1/no-such-thing/")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not found."})
    assert browser.get("/metrics/nothing").json() == {"detail": "Not found."}


def test_without_a_build_the_landing_page_points_to_the_api(settings, tmp_path):
    settings.DASHBOARD_BUILD_DIR = tmp_path / "missing"
    response = Client().get("/")
    assert response.status_code == 200
    assert b"/api/docs/" in response.content


def test_the_vc_queue_says_why_each_job_waits_in_the_schedulers_words(world):
    from tests.backend.jobs_support import make_job

    make_job(world, insight_message="Waiting: needs 3 x 8 A100 on separate nodes.")
    queue = world.client(world.member).get("/api/v1/vcs/vision/queue/").json()
    assert [row["insight_message"] for row in queue] == [
        "Waiting: needs 3 x 8 A100 on separate nodes."
    ]
