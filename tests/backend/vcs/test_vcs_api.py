"""Virtual clusters over REST: scoping, resources, settings, quotas and members."""

from __future__ import annotations

import pytest

from backend.jobs.models import JobStatus
from backend.vcs.models import Membership, Quota, VirtualCluster
from tests.backend.resources import ResourceTests
from tests.factories import GpuTypeFactory, JobFactory

pytestmark = pytest.mark.django_db

VCS = "/api/v1/vcs/"
GIB = 1024


def names(response) -> list[str]:
    return [vc["name"] for vc in response.json()["results"]]


def run_job(world, vc, node: str, gpus: int, workers: int = 1, **fields):
    """A running job holding `gpus` GPUs per worker, every worker on `node` (each on GPUs
    of its own, as the scheduler places them)."""
    cpus, memory = 8 * gpus, 64 * GIB * gpus
    placement = [
        {"node": node, "gpus": list(range(i * gpus, (i + 1) * gpus)), "cpus": cpus,
         "memory": memory}
        for i in range(workers)
    ]  # fmt: skip
    return JobFactory(
        owner=world.member, vc=vc, gpu_type=world.a100, status=JobStatus.RUNNING,
        workers=workers, gpus_per_worker=gpus, cpus_per_worker=cpus,
        memory_per_worker=memory, placement=placement, **fields,
    )  # fmt: skip


def queue_job(world, vc, gpus: int):
    return JobFactory(
        owner=world.member, vc=vc, gpu_type=world.a100, gpus_per_worker=gpus,
        cpus_per_worker=8 * gpus, memory_per_worker=64 * GIB * gpus,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("who", "visible"),
    [("member", ["vision"]), ("outsider", ["nlp"]), ("staff", ["nlp", "vision"])],
)
def test_users_list_only_their_vcs(world, who, visible):
    response = world.client(getattr(world, who)).get(VCS)

    assert response.status_code == 200
    assert names(response) == visible


def test_a_vc_the_user_is_not_in_is_not_found(world):
    assert world.client(world.outsider).get(f"{VCS}vision/").status_code == 404


def test_anonymous_users_see_no_vcs(anonymous):
    assert anonymous.get(VCS).status_code == 401


@pytest.mark.parametrize(("who", "role"), [("member", "member"), ("vc_admin", "admin")])
def test_detail_shows_settings_and_my_role(world, who, role):
    detail = world.client(getattr(world, who)).get(f"{VCS}vision/").json()

    assert detail["my_role"] == role
    assert (detail["policy"], detail["max_wall_time"]) == ("BF", 7 * 24 * 3600)


def test_cluster_admins_are_admins_of_every_vc(world):
    assert world.client(world.staff).get(f"{VCS}nlp/").json()["my_role"] == "admin"


def test_detail_shows_quota_use_queue_and_free_per_gpu_type(world):
    run_job(world, world.vision, "a100-1", gpus=4)
    run_job(world, world.vision, "a100-2", gpus=2, workers=2)
    run_job(world, world.nlp, "a100-3", gpus=8)
    queue_job(world, world.vision, gpus=8)
    JobFactory(owner=world.member, vc=world.vision, gpu_type=world.a100, status="finished")

    resources = world.client(world.member).get(f"{VCS}vision/").json()["resources"]

    assert resources == [
        {
            "gpu_type": "A100",
            "quota": {"gpus": 16, "cpus": 128.0, "memory": 1024 * GIB},
            "used": {"gpus": 8, "cpus": 64.0, "memory": 512 * GIB},
            "queued": {"gpus": 8, "cpus": 64.0, "memory": 512 * GIB},
            "free": {"gpus": 8, "cpus": 64.0, "memory": 512 * GIB},
            "running_jobs": 2,
            "queued_jobs": 1,
            "borrowed_gpus": 0,
            "cluster_idle_gpus": 32 - 4 - 4 - 8,
            # a100-3 is full, a100-1 and a100-2 have 4 GPUs free, a100-4 all 8
            "fragmentation": [
                {"free_gpus": k, "nodes": {0: 1, 4: 2, 8: 1}.get(k, 0)} for k in range(9)
            ],
        },
        {
            "gpu_type": "cpu",
            "quota": {"gpus": 0, "cpus": 32.0, "memory": 128 * GIB},
            "used": {"gpus": 0, "cpus": 0.0, "memory": 0},
            "queued": {"gpus": 0, "cpus": 0.0, "memory": 0},
            "free": {"gpus": 0, "cpus": 32.0, "memory": 128 * GIB},
            "running_jobs": 0,
            "queued_jobs": 0,
            "borrowed_gpus": 0,
            "cluster_idle_gpus": 0,
            "fragmentation": [{"free_gpus": 0, "nodes": 2}],  # two CPU-only nodes
        },
    ]


def test_borrowing_beyond_the_quota_leaves_nothing_free(world):
    run_job(world, world.nlp, "a100-1", gpus=8)
    run_job(world, world.nlp, "a100-2", gpus=4, preemptible=True)

    (a100,) = world.client(world.outsider).get(f"{VCS}nlp/").json()["resources"]

    assert (a100["used"]["gpus"], a100["free"]["gpus"], a100["borrowed_gpus"]) == (12, 0, 0)
    assert a100["free"]["memory"] == 0


def test_cluster_admins_create_vcs(world):
    response = world.client(world.staff).post(
        VCS, {"name": "speech", "policy": "RF", "max_wall_time": 3600}, format="json"
    )

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["name"], answer["policy"], answer["resources"]) == ("speech", "RF", [])
    assert VirtualCluster.objects.filter(name="speech", max_wall_time=3600).exists()


def test_a_new_vc_schedules_by_least_attained_service_unless_told_otherwise(world):
    response = world.client(world.staff).post(VCS, {"name": "speech"}, format="json")

    assert response.status_code == 201, response.json()
    assert response.json()["policy"] == "LAS"


@pytest.mark.parametrize(
    ("who", "body", "status", "field"),
    [
        ("vc_admin", {"name": "speech"}, 403, "detail"),
        ("staff", {"name": "vision"}, 400, "name"),
        ("staff", {"name": "Not A Slug"}, 400, "name"),
        ("staff", {"name": "speech", "policy": "LIFO"}, 400, "policy"),
        ("staff", {"name": "speech", "max_wall_time": -1}, 400, "max_wall_time"),
        ("staff", {"name": "speech", "max_wall_time": 10}, 400, "max_wall_time"),
        ("staff", {"name": "speech", "default_max_retries": 1000}, 400, "default_max_retries"),
    ],
)
def test_vc_creation_rules(world, who, body, status, field):
    response = world.client(getattr(world, who)).post(VCS, body, format="json")

    assert response.status_code == status
    assert field in response.json()
    assert VirtualCluster.objects.count() == 2


def test_vc_admins_change_settings(world):
    changes = {
        "policy": "RF", "max_wall_time": 3600, "max_interactive_gpus": 4,
        "default_max_retries": 0, "user_gpu_limit": 8, "notification": "Maintenance Friday",
    }  # fmt: skip

    response = world.client(world.vc_admin).patch(f"{VCS}vision/", changes, format="json")

    assert response.status_code == 200, response.json()
    assert {name: response.json()[name] for name in changes} == changes
    world.vision.refresh_from_db()
    assert (world.vision.policy, world.vision.user_gpu_limit) == ("RF", 8)


def test_the_user_gpu_limit_can_be_lifted(world):
    world.vision.user_gpu_limit = 8
    world.vision.save()

    response = world.client(world.vc_admin).patch(
        f"{VCS}vision/", {"user_gpu_limit": None}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["user_gpu_limit"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"policy": "LIFO"}, "policy"),
        ({"max_wall_time": -1}, "max_wall_time"),
        ({"max_wall_time": 10}, "max_wall_time"),
        ({"max_interactive_gpus": -1}, "max_interactive_gpus"),
        ({"default_max_retries": -1}, "default_max_retries"),
        ({"user_gpu_limit": -1}, "user_gpu_limit"),
        ({"user_gpu_limit": "lots"}, "user_gpu_limit"),
        ({"name": "renamed"}, "name"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_settings_are_refused_with_field_errors(world, body, field):
    response = world.client(world.vc_admin).patch(f"{VCS}vision/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    world.vision.refresh_from_db()
    assert (world.vision.name, world.vision.policy) == ("vision", "BF")


def test_a_settings_body_that_is_not_an_object_is_refused(world):
    response = world.client(world.vc_admin).patch(f"{VCS}vision/", ["policy"], format="json")

    assert response.status_code == 400


@pytest.mark.parametrize("policy", ["FIFO", "RF", "BF", "LAS", "FS"])
def test_a_vc_admin_chooses_any_scheduling_policy(world, policy):
    response = world.client(world.vc_admin).patch(
        f"{VCS}vision/", {"policy": policy}, format="json"
    )

    assert response.status_code == 200, response.json()
    world.vision.refresh_from_db()
    assert world.vision.policy == policy


def put_quotas(client, body, vc: str = "vision"):
    return client.put(f"{VCS}{vc}/quotas/", body, format="json")


def stored_quotas(vc) -> list[tuple[str, int, float, int]]:
    return [
        (quota.gpu_type.name, quota.gpus, float(quota.cpus), quota.memory)
        for quota in Quota.objects.filter(vc=vc).select_related("gpu_type")
    ]


def test_cluster_admins_replace_a_vcs_quotas(world):
    response = put_quotas(
        world.client(world.staff),
        [
            {"gpu_type": "A100", "gpus": 8},
            {"gpu_type": "cpu", "gpus": 0, "cpus": 16, "memory": "64Gi"},
        ],
    )

    assert response.status_code == 200, response.json()
    expected = [("A100", 8, 64.0, 512 * GIB), ("cpu", 0, 16.0, 64 * GIB)]
    assert stored_quotas(world.vision) == expected
    assert [(q["gpu_type"], q["gpus"]) for q in response.json()] == [("A100", 8), ("cpu", 0)]


def test_a_gpu_type_left_out_loses_its_quota(world):
    response = put_quotas(world.client(world.staff), [{"gpu_type": "A100", "gpus": 4}])

    assert response.status_code == 200
    assert stored_quotas(world.vision) == [("A100", 4, 32.0, 256 * GIB)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([{"gpu_type": "H100", "gpus": 8}], "Unknown GPU type 'H100'"),
        ([{"gpu_type": "A100", "gpus": 8}, {"gpu_type": "A100", "gpus": 4}], "repeated: A100"),
        ({"gpu_type": "A100", "gpus": 8}, "Send a list"),
        ([{"gpu_type": "A100", "gpus": -1}], "greater than or equal to 0"),
        ([{"gpu_type": "A100", "gpus": 8, "memory": "lots"}], "not a memory quantity"),
        ([{"gpu_type": "A100", "gpus": 8, "cpus": 10**9}], "no more than 7 digits"),
        ([{"gpu_type": "A100", "gpus": 2_000_000}], "less than or equal to 1000000"),
        ([{"gpu_type": "H200", "gpus": 1_000_000}], "implies 64000000.000 CPUs"),
    ],
)
def test_bad_quotas_are_refused(world, body, message):
    GpuTypeFactory(name="H200", cpus_per_gpu=64)

    response = put_quotas(world.client(world.staff), body)

    assert response.status_code == 400
    assert message in response.content.decode()
    assert stored_quotas(world.vision)[0] == ("A100", 16, 128.0, 1024 * GIB)


class TestSettingsAndQuotasNeedTheirAdmins(ResourceTests):
    """Only a VC's admins change its settings, only cluster admins set its quotas; a refused
    change changes nothing."""

    url = VCS
    methods = {"quotas": "put"}
    expected = {
        "update": {"member": 403, "other_vc_member": 404},
        "quotas": {"vc_admin": 403, "other_vc_member": 404},
    }

    @pytest.fixture
    def resource(self, world):
        return world.vision

    def detail_url(self, vc) -> str:
        return f"{VCS}{vc.name}/"

    def body(self, action, vc):
        return {"policy": "RF"} if action == "update" else [{"gpu_type": "A100", "gpus": 64}]

    def check(self, action, role, user, response, vc) -> None:
        vc.refresh_from_db()
        assert vc.policy == "BF"
        assert stored_quotas(vc)[0][:2] == ("A100", 16)


def test_members_read_their_quotas(world):
    response = world.client(world.member).get(f"{VCS}vision/quotas/")

    assert [(q["gpu_type"], q["gpus"]) for q in response.json()] == [("A100", 16), ("cpu", 0)]


def roles(vc) -> dict[str, str]:
    return dict(Membership.objects.filter(vc=vc).values_list("user__username", "role"))


def test_vc_admins_add_members_and_change_roles(world):
    client = world.client(world.vc_admin)

    added = client.post(f"{VCS}vision/members/", {"username": "otto"}, format="json")
    promoted = client.post(
        f"{VCS}vision/members/", {"username": "mia", "role": "admin"}, format="json"
    )

    assert added.status_code == 201, added.json()
    assert (added.json()["username"], added.json()["role"]) == ("otto", "member")
    assert promoted.json()["role"] == "admin"
    assert roles(world.vision) == {"mia": "admin", "vera": "admin", "otto": "member"}
    assert names(world.client(world.outsider).get(VCS)) == ["nlp", "vision"]


@pytest.mark.parametrize(
    ("who", "body", "status", "field"),
    [
        ("vc_admin", {"username": "nobody"}, 400, "username"),
        ("vc_admin", {"username": "otto", "role": "owner"}, 400, "role"),
        ("member", {"username": "otto"}, 403, "detail"),
        ("outsider", {"username": "otto"}, 404, "detail"),
    ],
)
def test_member_changes_are_checked(world, who, body, status, field):
    response = world.client(getattr(world, who)).post(f"{VCS}vision/members/", body, format="json")

    assert response.status_code == status
    assert field in response.json()
    assert roles(world.vision) == {"mia": "member", "vera": "admin"}


def test_a_deactivated_user_cannot_be_added(world):
    world.outsider.is_active = False
    world.outsider.save()

    response = world.client(world.vc_admin).post(
        f"{VCS}vision/members/", {"username": "otto"}, format="json"
    )

    assert response.status_code == 400


def test_vc_admins_remove_members_whose_jobs_stay(world):
    job = queue_job(world, world.vision, gpus=1)

    response = world.client(world.vc_admin).delete(f"{VCS}vision/members/mia/")

    assert response.status_code == 204
    assert roles(world.vision) == {"vera": "admin"}
    assert world.client(world.member).get(f"{VCS}vision/").status_code == 404
    job.refresh_from_db()
    assert job.vc == world.vision


@pytest.mark.parametrize(
    ("who", "username", "status"),
    [("member", "vera", 403), ("vc_admin", "otto", 404), ("vc_admin", "nobody", 404)],
)
def test_member_removal_is_checked(world, who, username, status):
    response = world.client(getattr(world, who)).delete(f"{VCS}vision/members/{username}/")

    assert response.status_code == status
    assert roles(world.vision) == {"mia": "member", "vera": "admin"}
    assert roles(world.nlp) == {"otto": "member"}


def test_members_see_who_is_in_their_vc(world):
    response = world.client(world.member).get(f"{VCS}vision/members/")

    assert [(m["username"], m["role"]) for m in response.json()] == [
        ("mia", "member"),
        ("vera", "admin"),
    ]


@pytest.mark.parametrize("action", ["queue", "deadlines"])
@pytest.mark.parametrize("name", ["vision", "nope"])
def test_a_vcs_queue_and_deadlines_take_the_lists_ordering_parameter_without_a_server_error(
    world, action, name
):
    response = world.client(world.member).get(f"{VCS}{name}/{action}/", {"ordering": "name"})

    assert response.status_code == (200 if name == "vision" else 404), response.content
