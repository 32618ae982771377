"""A VC admin sets the VC's idle policy; members cannot; bad values are field errors."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db
URL = "/api/v1/vcs/vision/"


def test_a_vc_admin_sets_the_idle_policy(world):
    body = {"idle_util_percent": 10, "idle_warn_minutes": 60, "idle_kill_minutes": 30,
            "interactive_idle_warn_minutes": None, "queue_wait_alert_minutes": 30}  # fmt: skip
    response = world.client(world.vc_admin).patch(URL, body, format="json")
    assert response.status_code == 200, response.content
    assert {name: response.json()[name] for name in body} == body
    world.vision.refresh_from_db()
    assert (world.vision.idle_warn_minutes, world.vision.idle_kill_minutes) == (60, 30)


def test_members_cannot_and_bad_values_are_field_errors(world):
    assert (
        world.client(world.member).patch(URL, {"idle_warn_minutes": 1}, format="json").status_code
        == 403
    )
    response = world.client(world.vc_admin).patch(
        URL, {"idle_util_percent": 150, "idle_warn_minutes": 0}, format="json"
    )
    assert response.status_code == 400
    assert {"idle_util_percent", "idle_warn_minutes"} <= set(response.json())
