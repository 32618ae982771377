"""SSH into a job whose image is not the host's: a real ``python -m backend.gateway``
(root) in front of sandboxed jobs whose root is an OCI image built in the test with umoci
from busybox (no bash in it), Debian's OpenSSH client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backend.jobs.models import JobStatus
from tests.backend.gateway_support import registered_key, running_gateway, ssh
from tests.backend.local_support import NODES, JobManager, submit
from tests.jobmanager.test_local_images import IMAGE, MARKER, build_image
from tests.jobmanager.test_local_sandbox import private_network, sandboxed_backend
from tests.unix_accounts import job_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


@pytest.fixture
def network() -> Iterator[dict[str, object]]:
    with private_network() as claimed:
        yield claimed


@pytest.fixture
def backend(host_tmp, settings, network):
    """The local backend, every job in a runc container, images from a store of the test's."""
    store = host_tmp / "image-store"
    build_image(store)
    settings.TRAINYARD_LOCAL_SANDBOX = "runc"
    settings.TRAINYARD_LOCAL_IMAGE_STORE = str(store)
    settings.TRAINYARD_LOG_DIR = host_tmp / "logs"
    settings.TRAINYARD_STOP_GRACE_SECONDS = 2
    options = {"nodes": NODES, "image_store_dir": store} | network
    with sandboxed_backend(host_tmp, **options) as backend:
        yield backend


@pytest.fixture
def gateway(host_tmp, backend, network) -> Iterator:
    with running_gateway(
        host_tmp, NODES,
        TRAINYARD_LOCAL_STATE_DIR=str(backend.state_dir),
        TRAINYARD_LOCAL_SANDBOX="runc",
        TRAINYARD_LOCAL_SANDBOX_BRIDGE=str(network["sandbox_bridge"]),
        TRAINYARD_LOCAL_SANDBOX_SUBNET=str(network["sandbox_subnet"]),
        TRAINYARD_LOCAL_SANDBOX_EGRESS_NAT="false",
    ) as gateway:  # fmt: skip
        yield gateway


def test_ssh_into_a_job_whose_image_has_no_bash_gets_the_image_s_sh(
    world, backend, redis_namespace, gateway, host_tmp
):
    job_account(world.member.username)
    job = submit(world, image=IMAGE, command="echo STARTED; sleep 300")
    job = JobManager(backend).run_until(job, JobStatus.RUNNING)
    key = registered_key(host_tmp, world.member)
    login = f"{world.member.username}+{job.job_id}"

    command = ssh(gateway, key, login, "cat /etc/os-release; echo SHELL=$SHELL")
    shell = ssh(gateway, key, login, "-T", input="echo in-shell $SHELL; exit 7\n")

    assert command.returncode == 0, command.stderr + gateway.output()
    assert command.stdout.splitlines() == [MARKER, "SHELL=/bin/sh"]
    assert (shell.returncode, shell.stdout) == (7, "in-shell /bin/sh\n"), shell.stderr
