"""The gateway's host key: made once, kept under the var dir, its fingerprint published."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
from django.conf import settings


def load_host_key(path: Path) -> asyncssh.SSHKey:
    """The gateway's host key, made (ed25519, mode 0600) on first use and kept: clients
    recognise the gateway by it. Its public half is written beside it (``.pub``)."""
    if path.exists():
        key = asyncssh.read_private_key(str(path))
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519", comment="trainyard-gateway")
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key.export_private_key())
        partial.replace(path)
    public = path.with_name(path.name + ".pub")
    if not public.exists():
        public.write_bytes(key.export_public_key())
        public.chmod(0o644)
    return key


def host_key_fingerprint(path: Path | None = None) -> str:
    """The SHA256 fingerprint of the gateway's host key ("" before its first start)."""
    public = Path(path or settings.TRAINYARD_SSH_HOST_KEY)
    public = public.with_name(public.name + ".pub")
    try:
        return asyncssh.import_public_key(public.read_bytes()).get_fingerprint("sha256")
    except (OSError, asyncssh.KeyImportError):
        return ""
