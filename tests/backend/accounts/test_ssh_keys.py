"""SSH public keys: real keys accepted with OpenSSH's fingerprint, bad pastes refused clearly."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from functools import cache
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa
from cryptography.utils import CryptographyDeprecationWarning

from backend.accounts.models import SshKey

pytestmark = pytest.mark.django_db

SSH_KEYS = "/api/v1/me/ssh-keys/"
SSH_KEYGEN = shutil.which("ssh-keygen")
needs_ssh_keygen = pytest.mark.skipif(SSH_KEYGEN is None, reason="OpenSSH ssh-keygen missing")


@cache
def generated_key(kind: str) -> str:
    """An OpenSSH public key line made with `cryptography`; cached, since RSA is slow."""
    private = {
        "ed25519": lambda: ed25519.Ed25519PrivateKey.generate(),
        "ecdsa-p256": lambda: ec.generate_private_key(ec.SECP256R1()),
        "rsa-2048": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa-3072": lambda: rsa.generate_private_key(public_exponent=65537, key_size=3072),
        "rsa-1024": lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024),
        "dsa": lambda: dsa.generate_private_key(key_size=1024),
    }[kind]()
    with warnings.catch_warnings():  # cryptography deprecates writing DSA keys, as we refuse them
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        public = private.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    return public.decode() + f" {kind}@laptop"


@cache
def private_key_pem() -> str:
    return (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )


def openssh_fingerprint(public_key: str, tmp_path: Path) -> str:
    """What `ssh-keygen -lf` prints for the key, e.g. SHA256:abc..."""
    path = tmp_path / "key.pub"
    path.write_text(public_key + "\n")
    listing = subprocess.run(
        [SSH_KEYGEN, "-lf", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return listing.split()[1]


def add_key(client, public_key: str, **fields):
    return client.post(SSH_KEYS, {"public_key": public_key} | fields, format="json")


@needs_ssh_keygen
@pytest.mark.parametrize(
    ("kind", "key_type", "bits"),
    [
        ("ed25519", "ssh-ed25519", 256),
        ("ecdsa-p256", "ecdsa-sha2-nistp256", 256),
        ("rsa-2048", "ssh-rsa", 2048),
        ("rsa-3072", "ssh-rsa", 3072),
    ],
)
def test_generated_keys_are_accepted_with_openssh_fingerprint(
    world, tmp_path, kind, key_type, bits
):
    public_key = generated_key(kind)

    response = add_key(world.client(world.member), public_key)

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["key_type"], answer["bits"]) == (key_type, bits)
    assert answer["fingerprint"] == openssh_fingerprint(public_key, tmp_path)
    assert answer["name"] == f"{kind}@laptop"


@needs_ssh_keygen
@pytest.mark.parametrize(
    ("args", "key_type", "bits"),
    [
        (["-t", "ed25519"], "ssh-ed25519", 256),
        (["-t", "ecdsa", "-b", "384"], "ecdsa-sha2-nistp384", 384),
        (["-t", "rsa", "-b", "3072"], "ssh-rsa", 3072),
    ],
)
def test_keys_made_by_ssh_keygen_are_accepted(world, tmp_path, args, key_type, bits):
    path = tmp_path / "id"
    subprocess.run(
        [SSH_KEYGEN, *args, "-N", "", "-C", "mia@laptop", "-q", "-f", str(path)], check=True
    )
    public_key = path.with_suffix(".pub").read_text()

    response = add_key(world.client(world.member), public_key, name="work")

    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["name"], answer["key_type"], answer["bits"]) == ("work", key_type, bits)
    assert answer["fingerprint"] == openssh_fingerprint(public_key.strip(), tmp_path)
    assert answer["public_key"] == public_key.strip()


def truncated(public_key: str) -> str:
    key_type, body, _ = public_key.split(" ", 2)
    return f"{key_type} {body[: len(body) // 2 // 4 * 4]}"


BAD_PASTES = {
    "rsa-1024": (
        lambda: generated_key("rsa-1024"),
        "RSA keys need at least 2048 bits; this one has 1024",
    ),
    "ssh-dss": (lambda: generated_key("dsa"), "DSA keys are not accepted"),
    "private-key": (private_key_pem, "This is a private key"),
    "garbage-base64": (lambda: "ssh-ed25519 !!!not*base64!!!", "not valid base64"),
    "truncated": (lambda: truncated(generated_key("ed25519")), "not a valid SSH public key"),
    "type-mismatch": (
        lambda: "ssh-ed25519 " + generated_key("rsa-2048").split()[1],
        "not a valid SSH",
    ),
    "two-keys": (
        lambda: generated_key("ed25519") + "\n" + generated_key("ecdsa-p256"),
        "Paste one public key, on one line",
    ),
    "no-body": (lambda: "ssh-ed25519", "has a type and a base64 body"),
    "security-key": (lambda: "sk-ssh-ed25519@openssh.com AAAA", "is not accepted"),
    "empty": (lambda: "", "may not be blank"),
    "whitespace": (lambda: "   \n", "may not be blank"),
}


@pytest.mark.parametrize("case", BAD_PASTES)
def test_bad_pastes_are_refused_with_a_clear_message(world, case):
    paste, message = BAD_PASTES[case]

    response = add_key(world.client(world.member), paste())

    assert response.status_code == 400
    assert message in response.json()["public_key"][0]
    assert not SshKey.objects.exists()


def test_a_key_belongs_to_one_user_cluster_wide(world):
    client = world.client(world.member)
    public_key = generated_key("ed25519")
    add_key(client, public_key)

    again = add_key(client, public_key.rsplit(" ", 1)[0] + " other-comment")
    other_user = add_key(world.client(world.outsider), public_key)

    assert again.status_code == 400
    assert "already added this key" in again.json()["public_key"][0]
    # The gateway knows who connects by the key alone: a second holder would be either.
    assert other_user.status_code == 400
    assert (
        "belongs to another account; each key may belong to one user only"
        in (other_user.json()["public_key"][0])
    )
    assert list(SshKey.objects.values_list("user__username", flat=True)) == ["mia"]


@pytest.mark.parametrize("separator", ["\r", "\u2028", "\x85", "\x0b"])
def test_a_paste_of_two_keys_on_two_lines_of_any_kind_is_refused(world, separator):
    first, second = generated_key("ed25519"), generated_key("ecdsa-p256")

    response = add_key(world.client(world.member), first + separator + second)

    assert response.status_code == 400
    assert not SshKey.objects.exists()


def test_keys_are_listed_to_their_owner_alone(world):
    add_key(world.client(world.member), generated_key("ed25519"))

    mine = world.client(world.member).get(SSH_KEYS).json()
    theirs = world.client(world.outsider).get(SSH_KEYS).json()

    assert [key["key_type"] for key in mine] == ["ssh-ed25519"]
    assert theirs == []


@pytest.mark.parametrize("method", ["get", "delete"])
def test_another_users_key_is_not_found(world, method):
    key_id = add_key(world.client(world.outsider), generated_key("ed25519")).json()["id"]

    response = getattr(world.client(world.member), method)(f"{SSH_KEYS}{key_id}/")

    assert response.status_code == 404
    assert SshKey.objects.filter(id=key_id).exists()


def test_a_key_can_be_deleted(world):
    client = world.client(world.member)
    key_id = add_key(client, generated_key("ed25519")).json()["id"]

    deleted = client.delete(f"{SSH_KEYS}{key_id}/")

    assert deleted.status_code == 204
    assert client.get(SSH_KEYS).json() == []
