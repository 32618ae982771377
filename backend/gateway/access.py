"""Who may open a session into which job: the gateway's decisions, read from the database.

The SSH user name says where to go (``<user>+<job id>`` for worker 0,
``<user>+<job id>.<rank>`` for worker N); the public key says who comes. A connection is
let in when the key is one the named user registered, the client's address is in the
user's allowed IPs in force (when the allowlist's ``gateway`` point is on, and the address
is not in ``TRAINYARD_SSH_TRUSTED_NETWORKS``), and the job is the user's and running.
Every refusal is one line a person understands, recorded as an
:class:`~backend.accounts.models.SshSessionEvent`, as every session opened is.

These functions are synchronous (Django's ORM); the gateway calls them in a thread.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections

from backend.accounts.actions import record_ssh_session
from backend.accounts.allowlist import SshGateway
from backend.accounts.models import SshKey, SshSessionOutcome
from backend.jobs.models import Job, JobStatus

LOGIN = re.compile(r"^(?P<user>[\w.@+-]+)\+(?P<job>[A-Za-z0-9]+)(?:\.(?P<rank>\d{1,4}))?$")
LOGIN_HELP = "log in as <user>+<job id> (worker 0) or <user>+<job id>.<rank>"


@dataclass(frozen=True)
class Login:
    username: str
    job_id: str
    rank: int

    def __str__(self) -> str:
        return f"{self.username}+{self.job_id}" + (f".{self.rank}" if self.rank else "")


@dataclass(frozen=True)
class Admission:
    """A connection let in: the job's worker it reaches, on behalf of whom."""

    login: Login
    user_id: int
    job_pk: int
    workers: int
    attempt: int = 0  # the job's current run (its pods are named after it)


class Refused(Exception):
    """A connection that may not go on; the message is shown to the person connecting."""


def parse_login(text: str) -> Login | None:
    """The login in an SSH user name (the last ``+`` separates the job: user names may
    hold one), or None when it is not one."""
    match = LOGIN.match(text)
    if not match:
        return None
    return Login(match["user"], match["job"], int(match["rank"] or 0))


def key_holder(login: Login, fingerprint: str) -> int | None:
    """The id of the login's user when the key (by its SHA256 fingerprint) is one they
    registered and they are active; None otherwise."""
    close_old_connections()
    return (
        SshKey.objects.filter(
            fingerprint=fingerprint,
            user__username=login.username,
            user__is_active=True,
        )
        .values_list("user_id", flat=True)
        .first()
    )


def gateway_enforces_allowlist() -> bool:
    return "gateway" in settings.TRAINYARD_ALLOWLIST_POINTS


def trusted(address: str) -> bool:
    """Whether the address is one of TRAINYARD_SSH_TRUSTED_NETWORKS (loopback by default),
    from which no allowed IP is needed."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return any(
        ip in ipaddress.ip_network(network, strict=False)
        for network in settings.TRAINYARD_SSH_TRUSTED_NETWORKS
    )


def admit(login: Login, user_id: int, address: str) -> Admission:
    """Let the connection in, or raise Refused saying why; either way an event."""
    close_old_connections()
    user = get_user_model().objects.get(pk=user_id)
    try:
        admission = _check(login, user, address)
    except Refused as refusal:
        record(login, address, SshSessionOutcome.REFUSED, str(refusal), user_id)
        raise
    record(login, address, SshSessionOutcome.OPENED, "", user_id)
    return admission


def _check(login: Login, user, address: str) -> Admission:
    if not user.is_active:
        raise Refused(f"the account {user.username} is disabled")
    enforced = gateway_enforces_allowlist() and not trusted(address)
    if enforced and not SshGateway.allows(user.username, address):
        raise Refused(
            f"your address {address} is not in your allowed IPs "
            "(add it, or renew it, on your account page)"
        )
    job = Job.objects.filter(job_id=login.job_id, owner=user).first()
    if job is None:
        raise Refused(f"{user.username} has no job {login.job_id}")
    if job.status != JobStatus.RUNNING:
        raise Refused(f"job {job.job_id} is {job.status}, not running")
    if login.rank >= job.workers:
        raise Refused(
            f"job {job.job_id} has no worker {login.rank} (workers 0 to {job.workers - 1})"
        )
    return Admission(login, user.pk, job.pk, job.workers, job.attempt)


def still_running(admission: Admission) -> bool:
    """Whether the admitted job still runs (a session ends when it stops)."""
    close_old_connections()
    return Job.objects.filter(pk=admission.job_pk, status=JobStatus.RUNNING).exists()


def record(
    login: Login | str,
    address: str,
    outcome: str,
    message: str = "",
    user_id: int | None = None,
) -> None:
    close_old_connections()
    record_ssh_session(
        str(login),
        login.job_id if isinstance(login, Login) else "",
        address,
        outcome,
        message,
        user_id,
    )
