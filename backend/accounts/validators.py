"""Checks for what users paste in: SSH public keys and allowed IP networks."""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import unicodedata
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from django.conf import settings

MIN_RSA_BITS = 2048
ACCEPTED_KEY_TYPES = {
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
}


@dataclass(frozen=True)
class ParsedSshKey:
    key_type: str
    bits: int
    fingerprint: str
    public_key: str
    comment: str


def parse_ssh_public_key(text: str) -> ParsedSshKey:
    """Parse one OpenSSH public key line; raise ValueError saying what is wrong with it."""
    line = " ".join(text.strip().split())
    if not line:
        raise ValueError("Paste a public key such as 'ssh-ed25519 AAAA... you@laptop'.")
    if "PRIVATE KEY" in line:
        raise ValueError("This is a private key. Paste the public key (the .pub file) instead.")
    # Joined, several keys would pass as the first key with the rest as its comment.
    if len([row for row in text.splitlines() if row.strip()]) > 1:
        raise ValueError("Paste one public key, on one line; add further keys one at a time.")
    parts = line.split(" ", 2)
    if len(parts) < 2:
        raise ValueError("A public key has a type and a base64 body, e.g. 'ssh-ed25519 AAAA...'.")
    key_type, body = parts[0], parts[1]
    comment = parts[2] if len(parts) == 3 else ""
    if any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in comment):
        raise ValueError("The key's comment has a control character; one key, on one line.")
    if key_type == "ssh-dss":
        raise ValueError("DSA keys are not accepted; use ed25519, ECDSA or RSA of 2048+ bits.")
    if key_type not in ACCEPTED_KEY_TYPES:
        raise ValueError(
            f"Key type {key_type!r} is not accepted; use ed25519, ECDSA or RSA of 2048+ bits."
        )
    try:
        blob = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError("The key body is not valid base64; paste the whole line.") from error
    try:
        key = load_ssh_public_key(f"{key_type} {body}".encode())
    except (ValueError, UnsupportedAlgorithm) as error:
        raise ValueError("This is not a valid SSH public key; paste the whole line.") from error
    if isinstance(key, rsa.RSAPublicKey):
        bits = key.key_size
        if bits < MIN_RSA_BITS:
            raise ValueError(f"RSA keys need at least {MIN_RSA_BITS} bits; this one has {bits}.")
    elif isinstance(key, ec.EllipticCurvePublicKey):
        bits = key.curve.key_size
    elif isinstance(key, ed25519.Ed25519PublicKey):
        bits = 256
    else:  # pragma: no cover - the type check above admits nothing else
        raise ValueError("Unsupported key type.")
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    normalized = f"{key_type} {body}" + (f" {comment}" if comment else "")
    return ParsedSshKey(key_type, bits, f"SHA256:{digest}", normalized, comment)


# Networks no connection from a user comes from, or that would stand for other addresses
# (an IPv4-mapped or NAT64 address is an IPv4 one in disguise): never allowed.
NOT_PEERS = [
    (ipaddress.ip_network("0.0.0.0/8"), "'this network' (unspecified)"),
    (ipaddress.ip_network("127.0.0.0/8"), "loopback"),
    (ipaddress.ip_network("169.254.0.0/16"), "link-local"),
    (ipaddress.ip_network("224.0.0.0/4"), "multicast"),
    (ipaddress.ip_network("240.0.0.0/4"), "reserved, with the broadcast address"),
    (ipaddress.ip_network("::/128"), "the unspecified address"),
    (ipaddress.ip_network("::1/128"), "loopback"),
    (ipaddress.ip_network("::ffff:0:0/96"), "IPv4-mapped; give the IPv4 address itself"),
    (ipaddress.ip_network("64:ff9b::/96"), "NAT64; give the IPv4 address itself"),
    (ipaddress.ip_network("64:ff9b:1::/48"), "local-use NAT64; give the IPv4 address itself"),
    (ipaddress.ip_network("fe80::/10"), "link-local"),
    (ipaddress.ip_network("ff00::/8"), "multicast"),
]


def parse_allowed_network(text: str) -> str:
    """Normalise an IPv4/IPv6 address or CIDR to a network string; raise ValueError if bad."""
    candidate = text.strip()
    if "%" in candidate:  # an IPv6 zone (fe80::1%eth0) names a local interface, not a peer
        raise ValueError(f"{candidate!r} has a zone index (%...); give the address without it.")
    try:
        network = ipaddress.ip_network(candidate, strict=True)
    except ValueError as error:
        try:
            loose = ipaddress.ip_network(candidate, strict=False)
        except ValueError:
            raise ValueError(
                f"{candidate!r} is not an IP address or CIDR network (e.g. 203.0.113.7 or "
                "203.0.113.0/24)."
            ) from error
        raise ValueError(
            f"{candidate!r} has host bits set; did you mean {loose.with_prefixlen}?"
        ) from error
    minimum = (
        settings.TRAINYARD_ALLOWED_IP_MIN_PREFIX_V4
        if network.version == 4
        else settings.TRAINYARD_ALLOWED_IP_MIN_PREFIX_V6
    )
    if network.prefixlen < minimum:
        raise ValueError(
            f"{network.with_prefixlen} is too broad; the widest network allowed is /{minimum}."
        )
    for special, what in NOT_PEERS:
        if network.version == special.version and network.overlaps(special):
            raise ValueError(
                f"{network.with_prefixlen} is {what} ({special.with_prefixlen}), not an address "
                "your connections come from."
            )
    return network.with_prefixlen
