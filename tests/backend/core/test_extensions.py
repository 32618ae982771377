"""Each app's API answers for its own resources, and what an app above adds to them comes
through a registered extension point (backend/core/extensions.py, issue 35)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import resolve

from backend.core.extensions import AnswerField, AnswerFields, Hook

# A URL of each resource, and the app whose api/ folder answers it.
HOMES = {
    "/api/v1/vcs/": "backend.vcs.api",
    "/api/v1/vcs/ml/": "backend.vcs.api",
    "/api/v1/vcs/ml/quotas/": "backend.vcs.api",
    "/api/v1/vcs/ml/members/": "backend.vcs.api",
    "/api/v1/vcs/ml/queue/": "backend.jobs.api",  # the VC's jobs
    "/api/v1/vcs/ml/deadlines/": "backend.jobs.api",
    "/api/v1/nodes/": "backend.clusters.api",
    "/api/v1/nodes/n1/cordon/": "backend.clusters.api",
    "/api/v1/gpu-types/": "backend.clusters.api",
}


@pytest.mark.parametrize("url", HOMES)
def test_a_resource_is_answered_by_its_own_app(url):
    view = resolve(url).func

    assert view.cls.__module__.startswith(HOMES[url] + "."), view.cls.__module__


def test_the_apps_above_register_what_they_add_at_startup():
    from backend.clusters.extensions import node_fields, node_removal
    from backend.jobmanager.removal import request_node_removal
    from backend.vcs.extensions import vc_detail_fields

    assert [field.name for field in vc_detail_fields] == ["resources"]
    assert [(field.name, field.after) for field in node_fields] == [("gpus_free", "last_heartbeat")]
    assert node_removal.function is request_node_removal


def test_a_hook_nobody_registered_says_so():
    hook: Hook = Hook("weighing a node")

    with pytest.raises(ImproperlyConfigured, match="Nothing is registered to do weighing"):
        _ = hook.function


def test_a_hook_takes_one_function():
    hook: Hook = Hook("weighing a node")
    hook.register(len)
    hook.register(len)  # a second ready() changes nothing

    with pytest.raises(ImproperlyConfigured, match="registered already"):
        hook.register(abs)
    assert hook.function is len


def test_an_answer_takes_each_field_name_once():
    fields: AnswerFields = AnswerFields("A node's answer")
    field = AnswerField(name="weight", schema=object, values=lambda request: len)
    fields.register(field)
    fields.register(field)

    with pytest.raises(ImproperlyConfigured, match="has a field 'weight' already"):
        fields.register(AnswerField(name="weight", schema=object, values=lambda request: abs))
    assert list(fields) == [field]
