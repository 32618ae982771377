"""Every stateful field has one writer: a job's and a storage run's status, a node's
readiness and repair state are written only by the module that checks and records the
change (the job and storage-run transition tables, the cluster and repair actions)."""

from __future__ import annotations

import ast
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[3] / "backend"

# Each stateful field, and the one module that writes it.
WRITERS: dict[str, set[str]] = {
    "status": {"jobs/transitions.py", "storage/runs.py"},  # Job.status; Scan/ExpiryRun.status
    "ready": {"clusters/actions.py"},
    "ready_reason": {"clusters/actions.py"},
    "repair_state": {"repairs/actions.py"},
}
# Writes outside the writers, each with its reason. Empty: there are none.
ALLOWED_ELSEWHERE: dict[tuple[str, str], str] = {}


def _bound_literals(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names bound to a value (the field lists handed to bulk_update)."""
    return {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    }


def _names_field(value: ast.expr | None, field: str, bound: dict[str, ast.expr]) -> bool:
    if isinstance(value, ast.Name) and value.id in bound:
        value = bound[value.id]
    if value is None:
        return False
    return any(isinstance(node, ast.Constant) and node.value == field for node in ast.walk(value))


def field_writers(source: str, field: str) -> list[str]:
    """Where the source writes ``field``: ``x.field = ...``, ``setattr(x, "field", ...)``,
    ``.update(field=...)`` (and ``update_or_create``), ``bulk_update`` with a field list
    naming it."""
    tree = ast.parse(source)
    bound = _bound_literals(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [
                element
                for target in node.targets
                for element in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if any(isinstance(target, ast.Attribute) and target.attr == field for target in targets):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else ""
        name = name or (func.id if isinstance(func, ast.Name) else "")
        writes = (
            (name == "setattr" and len(node.args) >= 2 and _names_field(node.args[1], field, {}))
            or (name in ("update", "update_or_create")
                and any(keyword.arg == field for keyword in node.keywords))
            or (name == "bulk_update" and _names_field(
                node.args[1] if len(node.args) > 1
                else next((k.value for k in node.keywords if k.arg == "fields"), None),
                field, bound))
        )  # fmt: skip
        if writes:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_writer_finder_finds_each_kind_of_write():
    source = (
        "FIELDS = ('ready', 'placement')\n"
        "node.ready = False\n"
        "run.status, run.error = 'failed', 'gone'\n"
        "setattr(node, 'ready', True)\n"
        "Node.objects.filter(pk=1).update(ready=False)\n"
        "Node.objects.bulk_update(nodes, ['ready'])\n"
        "Node.objects.bulk_update(nodes, FIELDS)\n"
        "Node.objects.filter(ready=True).update(schedulable=False)\n"
        "print(node.ready)\n"
    )
    assert len(field_writers(source, "ready")) == 5
    assert len(field_writers(source, "status")) == 1


def test_no_module_but_its_writer_writes_a_stateful_field():
    writes = {
        (str(path.relative_to(BACKEND)), field): found
        for path in sorted(BACKEND.rglob("*.py"))
        if "migrations" not in path.parts
        for field, writers in WRITERS.items()
        if str(path.relative_to(BACKEND)) not in writers
        for found in [field_writers(path.read_text(), field)]
        if found and (str(path.relative_to(BACKEND)), field) not in ALLOWED_ELSEWHERE
    }
    assert writes == {}


def test_each_writer_writes_its_field():
    # The table above names real writers: each one still writes what it is said to.
    for field, writers in WRITERS.items():
        for writer in writers:
            assert field_writers((BACKEND / writer).read_text(), field), (writer, field)
