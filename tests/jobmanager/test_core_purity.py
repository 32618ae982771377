"""The scheduling core stays pure and readable: no module of jobmanager/core imports
Django, Celery, Kubernetes or the portal, and none grows past the size a reader takes in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "jobmanager" / "core"
FORBIDDEN = ("django", "celery", "kubernetes", "backend", "rest_framework", "redis")
MAX_LINES = 500


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda path: path.name)
def test_a_core_module_imports_no_framework_and_stays_short(path: Path):
    outside = {name for name in imported(path) if name.split(".")[0] in FORBIDDEN}
    assert not outside, f"{path.name} imports {sorted(outside)}"
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_each_policy_has_its_own_module():
    modules = {path.stem for path in CORE.glob("*.py")}
    assert {"ordering", "backfill", "reservations", "las", "fair_share", "edf"} <= modules
