"""One declarative base for a REST resource's role matrix (NetBox's ``APIViewTestCases`` is
the model).

A test class names the resource and, for each action, the status each role is answered
with; the base generates one test per (action, role) that makes the request as that role
and checks the status, then calls ``check`` so the class can assert what the answer means
(the change made, or nothing changed). Roles are the people of ``world`` plus two more
(``roles`` below)::

    class TestJobReads(ResourceTests):
        url = "/api/v1/jobs/"
        expected = {"retrieve": {"member": 200, "other_vc_member": 404, "anonymous": 401}}

        @pytest.fixture
        def resource(self, world):
            return make_job(world)

        def detail_url(self, job):
            return f"{self.url}{job.job_id}/"

Actions: ``list`` (GET url), ``create`` (POST url), ``retrieve``/``update``/``delete``
(GET/PATCH/DELETE the detail), and any other name, the detail's action of that name: POST
``<detail>/<name>/`` unless ``methods`` says another method. Bodies come from ``body``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from backend.vcs.models import Role
from tests.factories import MembershipFactory, UserFactory

ANONYMOUS = "anonymous"
ROLES = (
    "member",  # mia, a member of vision (she owns what a test makes in vision)
    "colleague",  # cole, another member of vision
    "vc_admin",  # vera, vision's admin
    "other_vc_member",  # otto, a member of nlp only
    "other_vc_admin",  # nora, nlp's admin
    "cluster_admin",  # root, staff and superuser
    ANONYMOUS,
)
STANDARD_ACTIONS: Mapping[str, tuple[str, bool]] = {  # action -> (method, on the detail)
    "list": ("get", False),
    "create": ("post", False),
    "retrieve": ("get", True),
    "update": ("patch", True),
    "delete": ("delete", True),
}


@pytest.fixture
def roles(world) -> dict[str, object | None]:
    """Every role of ``ROLES``: the user who has it (None: anonymous)."""
    colleague = UserFactory(username="cole")
    other_vc_admin = UserFactory(username="nora")
    MembershipFactory(vc=world.vision, user=colleague, role=Role.MEMBER)
    MembershipFactory(vc=world.nlp, user=other_vc_admin, role=Role.ADMIN)
    return {
        "member": world.member,
        "colleague": colleague,
        "vc_admin": world.vc_admin,
        "other_vc_member": world.outsider,
        "other_vc_admin": other_vc_admin,
        "cluster_admin": world.staff,
        ANONYMOUS: None,
    }


class ResourceTests:
    """Generates ``test_role_matrix[<action>-<role>]`` from ``expected``. Subclasses set
    ``url`` and ``expected``, provide a ``resource`` fixture for detail actions, and may
    override ``detail_url``, ``body``, ``methods`` and ``check``."""

    url: ClassVar[str]
    expected: ClassVar[Mapping[str, Mapping[str, int]]]  # action -> role -> status
    methods: ClassVar[Mapping[str, str]] = {}  # a detail action's method, when not POST

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if metafunc.function.__name__ != "test_role_matrix":
            return
        unknown = {role for statuses in self.expected.values() for role in statuses} - set(ROLES)
        assert not unknown, f"roles not in tests.backend.resources.ROLES: {sorted(unknown)}"
        cases = [
            pytest.param(action, role, status, id=f"{action}-{role}")
            for action, statuses in self.expected.items()
            for role, status in statuses.items()
        ]
        metafunc.parametrize(("action", "role", "status"), cases)

    @pytest.fixture
    def resource(self) -> Any:
        """The object the detail actions act on; None for a class of list/create only."""
        return None

    def detail_url(self, resource: Any) -> str:
        return f"{self.url}{resource.pk}/"

    def body(self, action: str, resource: Any) -> Any:
        """The request's JSON body for ``action``; none by default."""
        return None

    def request(self, client, action: str, resource: Any):
        method, on_detail = STANDARD_ACTIONS.get(action, (self.methods.get(action, "post"), True))
        url = self.detail_url(resource) if on_detail else self.url
        if action not in STANDARD_ACTIONS:
            url += f"{action}/"
        body = self.body(action, resource)
        if body is None:
            return getattr(client, method)(url)
        return getattr(client, method)(url, body, format="json")

    def check(self, action: str, role: str, user: object | None, response, resource: Any) -> None:
        """What the answer means beyond its status (the change made, or nothing changed)."""

    def test_role_matrix(self, world, roles, resource, action, role, status) -> None:
        response = self.request(world.client(roles[role]), action, resource)

        assert response.status_code == status, (action, role, response.content[:500])
        self.check(action, role, roles[role], response, resource)


class FieldTests(ResourceTests):
    """The role matrix of changing one field of a resource (``update``: PATCH ``{field:
    value}``): a 200 shows the new value; any other answer leaves the stored value as it
    was, and a 400 names the field alone. Subclasses set ``field`` and ``value``."""

    field: ClassVar[str]
    value: ClassVar[Any]

    def body(self, action: str, resource: Any) -> Any:
        return {self.field: self.value} if action == "update" else None

    def stored(self, resource: Any) -> Any:
        resource.refresh_from_db()
        return getattr(resource, self.field)

    def request(self, client, action: str, resource: Any):
        self.before = self.stored(resource)
        return super().request(client, action, resource)

    def check(self, action: str, role: str, user: object | None, response, resource: Any) -> None:
        if response.status_code == 200:
            assert response.json()[self.field] == self.value
            return
        assert self.stored(resource) == self.before
        if response.status_code == 400:
            assert list(response.json()) == [self.field]
