"""Submission rules that keep tenants apart: a Unix account per owner, paths confined to the
owner's roots (symlinks resolved, checked again at deploy), sizes in bytes the kernel can
exec, and job names that show what they are."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend.accounts.models import UnixAccount
from backend.accounts.unix import provisioned_name
from backend.core.lease import acquire_lease
from backend.jobmanager import deployment, manager
from backend.jobmanager.scheduling import schedule_pass
from backend.jobs.models import FailureClass, Job, JobStatus
from backend.storage.models import StorageRoot
from jobmanager.backends.host_accounts import NAME_PATTERN
from jobmanager.backends.memory import MemoryBackend
from tests.backend.jobs_support import JOBS, submit
from tests.unix_accounts import job_account, owned_directory

pytestmark = pytest.mark.django_db

KIB = 1024


def errors_of(response) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    return response.json()


# --- accounts ------------------------------------------------------------------------------


def test_a_submission_provisions_the_owner_s_account_and_their_jobs_say_so(world):
    response = submit(world.client(world.member))

    assert response.status_code == 201, response.json()
    account = UnixAccount.objects.get(user=world.member)
    mia = job_account("mia")
    assert (account.unix_name, account.uid, account.gid) == ("ty-test-mia", mia.uid, mia.gid)
    assert account.provisioned


def test_any_username_becomes_a_valid_unix_name_and_two_never_one(settings):
    settings.TRAINYARD_UNIX_NAME_PREFIX = "ty-"
    odd = ["Mia.O'Neil+ml@example.com", "mia-o-neil", "MIA", "x" * 150, "x" * 149 + "y"]

    names = [provisioned_name(username) for username in ["alice", *odd]]

    assert names[0] == "ty-alice"
    assert all(NAME_PATTERN.fullmatch(name) for name in names)
    assert names[1].startswith("ty-mia-o-neil-") and names[2] == "ty-mia-o-neil"
    assert len(set(names)) == len(names)


def test_an_owner_without_an_account_is_refused_saying_so(world, settings):
    settings.TRAINYARD_UNIX_ACCOUNTS = "existing"  # nobody named "mia" on this host

    errors = errors_of(submit(world.client(world.member)))

    assert errors["unix_account"] == [
        "You have no Unix account on this cluster (none is named 'mia'); jobs run as their "
        "owner's account. Ask a cluster admin to set yours."
    ]
    assert not Job.objects.exists()


def test_an_existing_account_of_root_or_a_system_user_is_never_used(world, settings):
    # The staff user is named "root", as the host's uid 0 is.
    settings.TRAINYARD_UNIX_ACCOUNTS = "existing"

    errors = errors_of(submit(world.client(world.staff)))

    assert (
        "Jobs never run as root or a system account: uid 1000 or more"
        in (errors["unix_account"][0])
    )


def test_a_cluster_admin_sets_a_user_s_account_through_the_api(world):
    admin, url = world.client(world.staff), f"/api/v1/users/{world.outsider.username}/unix-account/"
    otto = job_account("otto")

    assert admin.get(url).status_code == 404
    refused = admin.put(url, {"unix_name": "root", "uid": 0, "gid": 0}, format="json")
    mismatch = admin.put(url, {"unix_name": otto.name, "uid": otto.uid + 1, "gid": otto.gid})
    answer = admin.put(url, {"unix_name": otto.name, "uid": otto.uid, "gid": otto.gid})

    assert set(errors_of(refused)) == {"uid", "gid"}
    assert errors_of(mismatch)["uid"] == [
        f"On this host {otto.name} is uid {otto.uid}, gid {otto.gid}."
    ]
    assert answer.status_code == 200, answer.content
    assert answer.json()["unix_name"] == otto.name and not answer.json()["provisioned"]
    assert world.client(world.outsider).get(url).status_code == 403
    me = world.client(world.outsider).get("/api/v1/me/").json()
    assert me["unix_account"]["uid"] == otto.uid
    assert admin.delete(url).status_code == 204
    assert not UnixAccount.objects.filter(user=world.outsider).exists()


# --- paths -------------------------------------------------------------------------------


@pytest.fixture
def storage(host_tmp, world) -> Path:
    """A storage root with VC directories: vcs/<vc>/<user> and vcs/<vc>/shared."""
    root = host_tmp / "shared"
    mia, vera = job_account("mia"), job_account("vera")
    owned_directory(root / "vcs" / "vision" / "mia", mia)
    owned_directory(root / "vcs" / "vision" / "vera", vera)
    owned_directory(root / "vcs" / "vision" / "shared", mia, 0o770)
    owned_directory(root / "vcs" / "nlp" / "shared", job_account("otto"), 0o770)
    for directory in (root, root / "vcs", root / "vcs" / "vision", root / "vcs" / "nlp"):
        directory.chmod(0o755)  # every account may pass, as on a real storage root
    StorageRoot.objects.create(name="shared", path=str(root), vc_directory="vcs")
    return root


@pytest.fixture
def home_link():
    """A link the member made in their home, to /etc."""
    link = Path(job_account("mia").home) / "mydir"
    link.unlink(missing_ok=True)
    link.symlink_to("/etc")
    yield link
    link.unlink(missing_ok=True)


@pytest.mark.parametrize("field", ["working_dir", "data_path", "output_path"])
def test_paths_under_the_owner_s_roots_are_accepted(world, storage, field):
    client = world.client(world.member)
    for path in (
        f"{storage}/vcs/vision/mia/run1",
        f"{storage}/vcs/vision/shared/imagenet",
        job_account("mia").home,
    ):
        response = submit(client, **{field: path})
        assert response.status_code == 201, (path, response.json())


@pytest.mark.parametrize("field", ["working_dir", "data_path", "output_path"])
def test_paths_outside_the_owner_s_roots_are_a_400_naming_the_field_and_the_roots(
    world, storage, home_link, field
):
    client = world.client(world.member)
    mine = f"{storage}/vcs/vision/mia"
    inside_link = Path(mine) / "theirs"
    inside_link.unlink(missing_ok=True)
    inside_link.symlink_to(f"{storage}/vcs/vision/vera")
    refused = {
        "/etc": "/etc is not under",
        f"{storage}/vcs/vision/vera": "is not under",  # another user's
        f"{storage}/vcs/nlp/shared": "is not under",  # another VC's
        f"{storage}/vcs/vision": "is not under",  # the VC's tree, not a directory in it
        str(home_link): f"{home_link} (through a symbolic link) is not under",
        f"{inside_link}/x": f"{inside_link}/x (through a symbolic link) is not under",
        f"{mine}/../vera": "may not contain '..'",
    }
    for path, words in refused.items():
        errors = errors_of(submit(client, **{field: path}))
        assert list(errors) == [field]
        assert words in errors[field][0], (path, errors)
    message = errors_of(submit(client, **{field: "/etc"}))[field][0]
    assert "the job's own directory (leave this empty)" in message
    assert f"your home {job_account('mia').home}" in message
    assert f"your directory on shared {mine}" in message
    assert f"VC vision's shared directory {storage}/vcs/vision/shared" in message
    assert not Job.objects.exists()


def test_a_path_that_changed_after_the_submit_is_refused_at_deploy_until_the_job_fails(
    world, storage, redis_namespace, settings
):
    settings.TRAINYARD_DEPLOY_BACKOFF_SECONDS = 0
    mine = Path(storage) / "vcs" / "vision" / "mia" / "run1"
    mine.mkdir()
    job = Job.objects.get(
        job_id=submit(world.client(world.member), working_dir=str(mine)).json()["id"]
    )
    shutil.rmtree(mine)
    mine.symlink_to(Path(storage) / "vcs" / "vision" / "vera")  # swapped for a link
    backend = MemoryBackend()

    def deploy_once() -> str:
        lease = acquire_lease(manager.LEASE_NAME, 10_000)
        _, applied = schedule_pass(lease)
        lease.release()
        ((job_pk, attempt),) = applied.deployments
        return deployment.deploy(backend, job_pk, attempt)

    outcomes = [deploy_once() for _ in range(3)]

    job.refresh_from_db()
    assert outcomes == ["requeued", "requeued", "failed"]
    assert backend.deploy_calls() == []  # nothing of it ever started
    assert job.status == JobStatus.FAILED
    assert (job.failure_class, job.failure_rule) == (FailureClass.USER, "deploy-failed")
    assert f"working_dir: {mine} (through a symbolic link) is not under" in job.status_message


# --- sizes and names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        # 40,000 emoji: 40,000 characters, 160,000 bytes (the kernel counts bytes).
        ({"command": "echo " + "\U0001f600" * 40_000}, "command", "160,005 bytes in UTF-8"),
        ({"command": "x" * (128 * KIB)}, "command", "at most 131,071 (128 KiB)"),
        ({"env": {"BIG": "v" * (200 * KIB)}}, "env", "BIG=... is 204,804 bytes"),
        ({"env": {f"V{i}": "v" * (100 * KIB) for i in range(11)}}, "env", "1 MiB"),
        ({"name": "train\u202eexe.gpj"}, "name", "bidirectional control character"),
        ({"name": "job\x1b[31mred"}, "name", "control character"),
        ({"name": "two\nlines"}, "name", "control character"),
    ],
)
def test_what_the_kernel_cannot_exec_or_a_name_that_hides_itself_is_a_400(
    world, fields, field, words
):
    errors = errors_of(submit(world.client(world.member), **fields))

    assert words in " ".join(errors[field]), errors


def test_a_lone_surrogate_that_utf_8_cannot_carry_is_a_400_not_a_server_error(world):
    body = '{"vc": "vision", "gpu_type": "A100", "command": "echo", "env": {"A": "\\ud800"}}'

    response = world.client(world.member).post(JOBS, body, content_type="application/json")

    assert errors_of(response)["env"] == ["The value of A is not valid Unicode (a lone surrogate)."]


def test_a_command_just_under_the_kernel_s_limit_is_accepted(world):
    response = submit(world.client(world.member), command="x" * (128 * KIB - 1))

    assert response.status_code == 201


def test_a_default_name_keeps_nothing_that_hides_itself(world):
    answer = submit(world.client(world.member), command="./tra\u202ein.py --fast").json()

    assert answer["name"] == "train.py"
