"""The Unix account each user's jobs run as: the rules an account must meet, how one is
found or provisioned (``TRAINYARD_UNIX_ACCOUNTS``), and whether this installation needs
them at all (its tenancy).

Jobs are isolated by the operating system: the local backend run as root and the
Kubernetes backend run every job as its owner's uid, so a user without an account cannot
submit. A portal that is not root cannot switch users and runs every job as itself
(single-user mode), which it says plainly.
"""

from __future__ import annotations

import hashlib
import re

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from jobmanager.backends import RunAs
from jobmanager.backends.host_accounts import (
    NAME_PATTERN,
    can_switch_users,
    lookup,
    own_run_as,
    parse_uid_range,
    run_as,
)

MULTI_TENANT = "multi-tenant"
SINGLE_USER = "single-user"
_NOT_NAME = re.compile(r"[^a-z0-9_-]+")
NAME_MAX = 32


class NoUnixAccount(Exception):
    """The user has no account their jobs could run as; the message says what to do."""


def uid_range() -> range:
    try:
        return parse_uid_range(settings.TRAINYARD_UNIX_UID_RANGE)
    except ValueError as error:
        raise ImproperlyConfigured(f"TRAINYARD_UNIX_UID_RANGE: {error}") from error


def accounts_required() -> bool:
    """Whether jobs run as their owners' accounts here: on Kubernetes and Slurm, and on
    the local backend when this process is root."""
    backend = settings.TRAINYARD_BACKEND
    return backend in ("kubernetes", "slurm") or (backend == "local" and can_switch_users())


def tenancy() -> dict[str, str]:
    """How this installation keeps tenants apart, in words for the API and dashboard."""
    backend = settings.TRAINYARD_BACKEND
    containment = f" {_local_containment()}" if backend == "local" else ""
    if backend == "local" and not can_switch_users():
        own = own_run_as()
        return {
            "mode": SINGLE_USER,
            "message": (
                f"Single-user mode: the portal does not run as root, so every job runs as "
                f"its account {own.name} (uid {own.uid}) and jobs are not isolated from one "
                "another or from the portal. Run it as root for multi-tenant use "
                f"(docs/operations.md).{containment}"
            ),
        }
    if backend == "memory":
        return {"mode": SINGLE_USER, "message": "The memory backend runs no processes."}
    how = (
        f"provisioned as {settings.TRAINYARD_UNIX_NAME_PREFIX}<user> in uids "
        f"{settings.TRAINYARD_UNIX_UID_RANGE}"
        if settings.TRAINYARD_UNIX_ACCOUNTS == "provision"
        else "the host's accounts of the same name, or the one a cluster admin set"
    )
    return {
        "mode": MULTI_TENANT,
        "message": f"Every job runs as its owner's Unix account ({how}).{containment}",
    }


def _local_containment() -> str:
    """Whether the local backend runs jobs in containers, in a sentence."""
    from backend.clusters.backends import get_backend

    return str(getattr(get_backend(), "containment", ""))


def provisioned_name(username: str) -> str:
    """``<prefix><username>`` as a Unix account name: lower case, other characters as
    '-', cut to 32 with a hash of the username when it is not already a valid name."""
    prefix = settings.TRAINYARD_UNIX_NAME_PREFIX
    name = prefix + username
    if NAME_PATTERN.fullmatch(name):
        return name
    cleaned = _NOT_NAME.sub("-", username.lower()).strip("-") or "user"
    digest = hashlib.sha256(username.encode()).hexdigest()[:6]
    return f"{prefix}{cleaned}"[: NAME_MAX - 7] + f"-{digest}"


def account_errors(uid: int | None, gid: int | None, unix_name: str) -> dict[str, list[str]]:
    """What is wrong with an account for jobs to run as, by field: a valid name, a uid
    and gid at or above the minimum (never root's nor a system account's), and, when this
    host knows the name, the host's uid and gid."""
    errors: dict[str, list[str]] = {}
    if not NAME_PATTERN.fullmatch(unix_name or ""):
        errors["unix_name"] = [
            f"{unix_name!r} is not a Unix account name (a-z, 0-9, _ and -, at most 32, "
            "starting with a letter or _)."
        ]
    minimum_uid, minimum_gid = settings.TRAINYARD_UNIX_MIN_UID, settings.TRAINYARD_UNIX_MIN_GID
    if uid is None or uid < minimum_uid or uid >= 2**32 - 1:
        errors["uid"] = [f"Jobs never run as root or a system account: uid {minimum_uid} or more."]
    if gid is None or gid < minimum_gid or gid >= 2**32 - 1:
        errors["gid"] = [f"The primary group must be a gid of {minimum_gid} or more."]
    entry = lookup(unix_name) if "unix_name" not in errors else None
    if entry is not None and (entry.pw_uid, entry.pw_gid) != (uid, gid):
        errors.setdefault("uid", []).append(
            f"On this host {unix_name} is uid {entry.pw_uid}, gid {entry.pw_gid}."
        )
    return errors


def host_account_for(username: str) -> tuple[int, int, str, bool]:
    """The account a user without one gets under the policy: (uid, gid, name,
    provisioned). Raises NoUnixAccount saying why there is none."""
    from jobmanager.backends.host_accounts import AccountError, ensure_account

    if settings.TRAINYARD_UNIX_ACCOUNTS == "provision":
        name = provisioned_name(username)
        try:
            entry = ensure_account(
                name,
                uid_range(),
                settings.TRAINYARD_UNIX_HOME_BASE,
                comment=f"Trainyard user {username}",
            )
        except AccountError as error:
            raise NoUnixAccount(f"Could not create the Unix account {name}: {error}") from error
        return entry.pw_uid, entry.pw_gid, entry.pw_name, True
    known = lookup(username)
    if known is None:
        raise NoUnixAccount(
            f"You have no Unix account on this cluster (none is named {username!r}); jobs "
            "run as their owner's account. Ask a cluster admin to set yours."
        )
    return known.pw_uid, known.pw_gid, known.pw_name, False


def run_as_of(account) -> RunAs:
    """The identity a backend runs the account's jobs as (groups from this host)."""
    return run_as(account.uid, account.gid, account.unix_name)


def home_of(account) -> str:
    """Where the owner's home is: their account's on this host, or in single-user mode the
    portal's own ("" when neither is known)."""
    if account is not None:
        return run_as_of(account).home
    return "" if can_switch_users() else own_run_as().home
