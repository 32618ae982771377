"""Submit-time path checks resolve as the job's owner, not as the portal (root): a submission
learns nothing of what its owner could not read, neither the names in another tenant's
private home nor another tenant's process's working directory through /proc/<pid>/cwd, and
a path under /proc is a 400 naming the field."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.jobs import paths
from backend.jobs.models import Job
from backend.jobs.paths import resolved_as
from jobmanager.backends import RunAs
from tests.backend.jobs_support import submit
from tests.unix_accounts import (
    JOB_PYTHON,
    JOB_PYTHONPATH,
    REPOSITORY,
    job_account,
    owned_directory,
)

pytestmark = pytest.mark.django_db


def refused(response, field: str) -> str:
    """The one error of a 400 that names only ``field``, with the answer's whole text."""
    assert response.status_code == 400, response.content
    errors = response.json()
    assert list(errors) == [field], errors
    return errors[field][0]


@pytest.fixture
def tenant_secret() -> Iterator[tuple[RunAs, str]]:
    """Another tenant (otto) and a name only they may see: a directory in their home."""
    otto = job_account("otto")
    secret = f"secret-{secrets.token_hex(4)}"
    directory = owned_directory(Path(otto.home) / secret, otto)
    assert Path(otto.home).stat().st_mode & 0o077 == 0  # a home is its owner's alone
    yield otto, secret
    directory.rmdir()


@pytest.fixture
def link_in() -> Iterator[object]:
    """Makes symlinks, removed at the end whatever happens."""
    made: list[Path] = []

    def make(directory: str, target: str, account: RunAs) -> Path:
        link = Path(directory) / f"link-{secrets.token_hex(4)}"
        link.symlink_to(target)
        made.append(link)
        subprocess.run(["chown", "-h", f"{account.uid}:{account.gid}", str(link)], check=True)
        return link

    yield make
    for link in made:
        link.unlink(missing_ok=True)


@pytest.mark.parametrize("field", ["working_dir", "data_path", "output_path"])
def test_a_link_in_another_tenant_s_private_home_is_refused_without_telling_its_target(
    world, tenant_secret, link_in, field
):
    otto, secret = tenant_secret
    theirs = link_in(otto.home, f"{otto.home}/{secret}", otto)

    response = submit(world.client(world.member), **{field: str(theirs)})

    message = refused(response, field)
    assert message.startswith(f"{theirs} is not under a directory you may use")
    assert secret not in response.content.decode()
    assert not Job.objects.exists()


def test_another_tenant_s_working_directory_is_not_told_through_proc(world, tenant_secret, link_in):
    otto, secret = tenant_secret
    their_process = subprocess.Popen(
        ["sleep", "600"],
        cwd=f"{otto.home}/{secret}",
        user=otto.uid,
        group=otto.gid,
        extra_groups=[],
    )
    try:
        mia = job_account("mia")
        peek = link_in(mia.home, f"/proc/{their_process.pid}/cwd", mia)
        client = world.client(world.member)

        through_a_link = submit(client, working_dir=str(peek))
        directly = submit(client, working_dir=f"/proc/{their_process.pid}/cwd")
    finally:
        their_process.kill()
        their_process.wait()

    assert refused(through_a_link, "working_dir").startswith(
        f"{peek} (through a symbolic link) is not under a directory you may use"
    )
    assert secret not in through_a_link.content.decode()
    assert refused(directly, "working_dir") == (
        "The path may not be under /proc: that is the kernel's view of processes."
    )


@pytest.mark.parametrize("path", ["/proc/1/cwd", "/proc", "//proc/self/root/etc"])
def test_a_path_under_proc_is_a_400_naming_the_field_not_a_server_error(world, path):
    response = submit(world.client(world.member), data_path="/tmp", working_dir=path)

    errors = response.json()
    assert response.status_code == 400, errors
    assert errors["working_dir"] == [
        "The path may not be under /proc: that is the kernel's view of processes."
    ]


def test_the_owner_s_own_links_are_still_followed_as_far_as_they_may_look(link_in):
    mia, otto = job_account("mia"), job_account("otto")
    into_own_home = link_in(mia.home, mia.home, mia)
    into_theirs = link_in(mia.home, f"{otto.home}/anything", mia)

    real = resolved_as(mia, [f"{into_own_home}/x", f"{into_theirs}/y"])

    assert real == {
        f"{into_own_home}/x": f"{mia.home}/x",
        f"{into_theirs}/y": f"{otto.home}/anything/y",
    }


def test_paths_that_cannot_be_checked_are_a_400_naming_each_field(world, monkeypatch):
    monkeypatch.setattr(paths, "REALPATH", "/nonexistent/realpath")
    home = job_account("mia").home

    response = submit(world.client(world.member), working_dir=home, output_path=f"{home}/out")

    errors = response.json()
    assert response.status_code == 400, errors
    assert sorted(errors) == ["output_path", "working_dir"]
    assert errors["working_dir"][0].startswith(f"{home}: the paths could not be checked: ")
    assert not Job.objects.exists()


SINGLE_USER = """
import json, sys
from backend.jobs.paths import resolved_as
print(json.dumps(resolved_as(None, sys.argv[1:])))
"""


def test_in_single_user_mode_links_are_followed_as_the_portal_s_own_account(tenant_secret, link_in):
    otto, secret = tenant_secret
    theirs = link_in(otto.home, f"{otto.home}/{secret}", otto)
    portal = job_account("portal")
    inside = link_in(portal.home, portal.home, portal)
    given = [str(theirs), f"{inside}/run1", "/proc/1/cwd"]

    result = subprocess.run(
        ["setpriv", f"--reuid={portal.uid}", f"--regid={portal.gid}", "--init-groups",
         JOB_PYTHON, "-c", SINGLE_USER, *given],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": portal.home, "PYTHONPATH": JOB_PYTHONPATH},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        str(theirs): str(theirs),  # another account's home: not looked into
        f"{inside}/run1": f"{portal.home}/run1",
        "/proc/1/cwd": "/proc/1/cwd",  # os.path.realpath raised PermissionError here
    }
