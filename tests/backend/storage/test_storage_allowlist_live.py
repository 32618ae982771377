"""The storage and allowlist managers live: gunicorn, a real Celery worker and beat on the
test database and Redis. A scan asked for over HTTP runs on the worker and its snapshot
comes back through the API; an allowed IP reaches the firewall set through beat's
reconcile and leaves it when it expires."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from backend.accounts.actions import create_api_token
from backend.accounts.models import AllowedIpEvent
from backend.storage.models import StorageRoot
from tests.backend.live_support import live_env, start_beat, start_worker
from tests.factories import UserFactory
from tests.polling import wait_until
from tests.servers import kill_process_group, start_gunicorn
from tests.storagemanager.trees import make_files

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

STAND_IN = Path(__file__).parents[1] / "bin" / "nft"


@pytest.fixture
def live(tmp_path: Path, redis_url: str):
    env = live_env(tmp_path, redis_url) | {
        "TRAINYARD_ALLOWLIST_POINTS": "gateway,nftables",
        "TRAINYARD_ALLOWLIST_RECONCILE_SECONDS": "1",
        "TRAINYARD_NFT_COMMAND": str(STAND_IN),
        "NFT_STANDIN_LOG": str(tmp_path / "nft.log"),
        "NFT_STANDIN_STATE": str(tmp_path / "nft.json"),
    }
    web, base_url = start_gunicorn(extra_env=env)
    others = [start_worker(env, "storage"), start_beat(env, tmp_path)]
    try:
        yield base_url, tmp_path
    finally:
        for process in (web, *others):
            kill_process_group(process)


def test_a_scan_runs_on_the_worker_and_its_snapshot_is_served(live, tmp_path):
    base_url, _ = live
    admin = UserFactory(username="ada", is_staff=True)
    _, token = create_api_token(admin, "live")
    headers = {"Authorization": f"Token {token}"}
    tree = tmp_path / "shared"
    make_files(tree / "vcs" / "vision" / "runs", 30, size=1000)
    StorageRoot.objects.create(name="shared", path=str(tree), vc_directory="vcs")

    asked = requests.post(f"{base_url}/api/v1/storage/roots/shared/scan/", headers=headers)
    assert asked.status_code == 202

    def scan_done() -> bool:
        scans = requests.get(f"{base_url}/api/v1/storage/scans/", headers=headers).json()
        return bool(scans["results"]) and scans["results"][0]["status"] == "done"

    wait_until(scan_done, 60, "the worker to finish the scan")
    usage = requests.get(
        f"{base_url}/api/v1/storage/usage/", params={"kind": "vc"}, headers=headers
    ).json()
    assert [(row["key"], row["files"]) for row in usage["results"]] == [("vision", 30)]


def test_beat_puts_an_allowed_ip_in_the_firewall_and_takes_it_out_when_it_expires(live):
    base_url, tmp_path = live
    user = UserFactory(username="ivy")
    _, token = create_api_token(user, "live")
    headers = {"Authorization": f"Token {token}"}

    def allow(expires_in: timedelta | None = None) -> None:
        body = {"address": "203.0.113.7"}
        if expires_in is not None:
            body["expires_at"] = (timezone.now() + expires_in).isoformat()
        answer = requests.post(f"{base_url}/api/v1/me/allowed-ips/", json=body, headers=headers)
        assert answer.status_code == 201, answer.text

    def firewall() -> list[str]:
        state_file = tmp_path / "nft.json"
        if not state_file.exists():
            return []
        table = json.loads(state_file.read_text()).get("inet trainyard", {})
        return table.get("allowed_v4", {}).get("elem", [])

    # Allowed for the cluster's default lifetime: it stays in the firewall however slowly
    # the worker and beat come up. Renewing it with an expiry two seconds away then lets
    # it expire while they run.
    allow()
    wait_until(lambda: firewall() == ["203.0.113.7/32"], 60, "the reconcile to add the IP")
    allow(expires_in=timedelta(seconds=2))
    wait_until(lambda: firewall() == [], 60, "the reconcile to remove the expired IP")
    assert list(AllowedIpEvent.objects.values_list("kind", flat=True)) == [
        "expired",
        "renewed",
        "added",
    ]
