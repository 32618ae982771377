"""The Kubernetes manifests in deploy/ pass the official Kubernetes OpenAPI schemas."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

MANIFESTS = sorted(
    (Path(__file__).resolve().parent.parent / "deploy" / "kubernetes").glob("*.yaml")
)
RESOURCES = [
    pytest.param(resource, id=f"{path.name}:{resource['kind']}/{resource['metadata']['name']}")
    for path in MANIFESTS
    for resource in yaml.safe_load_all(path.read_text())
    if resource
]


def test_there_are_manifests():
    assert len(RESOURCES) >= 8


@pytest.mark.parametrize("resource", RESOURCES)
def test_manifest_is_valid_for_kubernetes(resource):
    kubernetes_validate.validate(resource, kubernetes_validate.latest_version(), strict=True)
