"""The role matrices of one field of a node (``NodeFieldTests``: a100-1 through the nodes
API) and of a VC (``VcFieldTests``: vision through the VCs API), on the declarative base of
``tests.backend.resources``."""

from __future__ import annotations

import pytest

from backend.clusters.models import Node
from backend.vcs.models import VirtualCluster
from tests.backend.resources import FieldTests

NODES = "/api/v1/nodes/"
VCS = "/api/v1/vcs/"


class NodeFieldTests(FieldTests):
    url = NODES

    @pytest.fixture
    def resource(self, world) -> Node:
        return Node.objects.get(name="a100-1")

    def detail_url(self, node: Node) -> str:
        return f"{NODES}{node.name}/"


class VcFieldTests(FieldTests):
    url = VCS

    @pytest.fixture
    def resource(self, world) -> VirtualCluster:
        return world.vision

    def detail_url(self, vc: VirtualCluster) -> str:
        return f"{VCS}{vc.name}/"
