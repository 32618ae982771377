"""Allowed IPs: addresses and networks normalised, risky ones refused, each until it expires."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from backend.accounts.models import AllowedIp

pytestmark = pytest.mark.django_db

ALLOWED_IPS = "/api/v1/me/allowed-ips/"


def allow(client, address: str, **fields):
    return client.post(ALLOWED_IPS, {"address": address} | fields, format="json")


def days_from_now(answer: dict) -> float:
    return (parse_datetime(answer["expires_at"]) - timezone.now()) / timedelta(days=1)


@pytest.mark.parametrize(
    ("address", "network"),
    [
        ("203.0.113.7", "203.0.113.7/32"),
        (" 203.0.113.7 ", "203.0.113.7/32"),
        ("203.0.113.0/24", "203.0.113.0/24"),
        ("10.20.0.0/16", "10.20.0.0/16"),
        ("2001:DB8::1", "2001:db8::1/128"),
        ("2001:db8:0:0::/64", "2001:db8::/64"),
    ],
)
def test_addresses_and_networks_are_normalised(world, address, network):
    response = allow(world.client(world.member), address, description="home")

    assert response.status_code == 201, response.json()
    assert response.json()["network"] == network
    assert response.json()["expired"] is False
    assert AllowedIp.objects.get(user=world.member).network == network


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("10.0.0.1/24", "has host bits set; did you mean 10.0.0.0/24?"),
        ("2001:db8::1/64", "did you mean 2001:db8::/64?"),
        ("0.0.0.0/0", "0.0.0.0/0 is too broad; the widest network allowed is /16"),
        ("10.0.0.0/8", "10.0.0.0/8 is too broad"),
        ("2001:db8::/32", "is too broad; the widest network allowed is /48"),
        ("::/0", "is too broad"),
        ("not-an-ip", "is not an IP address or CIDR network"),
        ("expired", "is not an IP address or CIDR network"),
        ("300.1.1.1", "is not an IP address"),
        ("10.0.0.0/33", "is not an IP address"),
        ("", "may not be blank"),
        ("fe80::1%eth0", "has a zone index"),
        # Addresses no connection comes from, or IPv4 addresses in IPv6 disguise.
        ("::ffff:203.0.113.7", "is IPv4-mapped; give the IPv4 address itself"),
        ("::ffff:0:0/96", "is IPv4-mapped"),
        ("64:ff9b::cb00:7107", "is NAT64; give the IPv4 address itself"),
        ("64:ff9b:1::/48", "is local-use NAT64"),
        ("127.0.0.1", "is loopback (127.0.0.0/8)"),
        ("127.1.0.0/16", "is loopback"),
        ("::1", "is loopback (::1/128)"),
        ("169.254.10.1", "is link-local"),
        ("fe80::1", "is link-local (fe80::/10)"),
        ("224.0.0.1", "is multicast"),
        ("ff02::1", "is multicast (ff00::/8)"),
        ("0.0.0.0", "'this network' (unspecified)"),
        ("::", "is the unspecified address"),
        ("::/48", "is the unspecified address"),  # holds ::1 and the mapped range
        ("255.255.255.255", "is reserved, with the broadcast address"),
    ],
)
def test_bad_addresses_are_refused_on_the_address_field(world, address, message):
    response = allow(world.client(world.member), address)

    assert response.status_code == 400
    assert message in response.json()["address"][0]
    assert not AllowedIp.objects.exists()


def test_default_expiry_is_the_configured_number_of_days(world):
    answer = allow(world.client(world.member), "203.0.113.7").json()

    assert 29.99 < days_from_now(answer) <= 30


@override_settings(TRAINYARD_ALLOWED_IP_DAYS=7)
def test_default_expiry_follows_the_setting(world):
    answer = allow(world.client(world.member), "203.0.113.7").json()

    assert 6.99 < days_from_now(answer) <= 7


def test_an_explicit_expiry_within_the_limit_is_kept(world):
    expires_at = timezone.now() + timedelta(days=3)

    answer = allow(world.client(world.member), "203.0.113.7", expires_at=expires_at).json()

    assert parse_datetime(answer["expires_at"]) == expires_at


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        (timedelta(minutes=-1), "must be in the future"),
        (timedelta(days=31), "at most 30 days from now"),
    ],
)
def test_an_expiry_outside_the_window_is_refused(world, offset, message):
    response = allow(world.client(world.member), "203.0.113.7", expires_at=timezone.now() + offset)

    assert response.status_code == 400
    assert message in response.json()["expires_at"][0]


def test_adding_the_same_network_renews_it(world):
    client = world.client(world.member)
    first = allow(client, "203.0.113.7", expires_at=timezone.now() + timedelta(days=1)).json()

    again = allow(client, "203.0.113.7/32", description="office")

    assert again.status_code == 201
    assert again.json()["id"] == first["id"]
    assert days_from_now(again.json()) > 29.99
    assert [(ip.network, ip.description) for ip in AllowedIp.objects.all()] == [
        ("203.0.113.7/32", "office")
    ]


def test_an_expired_address_is_listed_as_expired(world):
    AllowedIp.objects.create(
        user=world.member, network="203.0.113.7/32", expires_at=timezone.now() - timedelta(days=1)
    )

    listed = world.client(world.member).get(ALLOWED_IPS).json()

    assert [(ip["network"], ip["expired"]) for ip in listed] == [("203.0.113.7/32", True)]


@pytest.mark.parametrize("method", ["get", "delete"])
def test_another_users_address_is_not_found(world, method):
    ip_id = allow(world.client(world.outsider), "203.0.113.7").json()["id"]

    response = getattr(world.client(world.member), method)(f"{ALLOWED_IPS}{ip_id}/")

    assert response.status_code == 404
    assert AllowedIp.objects.filter(id=ip_id).exists()


def test_an_address_can_be_deleted(world):
    client = world.client(world.member)
    ip_id = allow(client, "203.0.113.7").json()["id"]

    assert client.delete(f"{ALLOWED_IPS}{ip_id}/").status_code == 204
    assert client.get(ALLOWED_IPS).json() == []
