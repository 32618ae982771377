"""Layers only point down: no import circle among backend's modules, counting the imports
made inside functions (a lazy import is still a dependency), not those for type checkers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def backend_modules(package: Path) -> dict[str, Path]:
    modules = {}
    for path in package.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    # "from a.b import c" depends on a.b.c where c is a module, else on a.b.
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other backend modules (packages' own __init__ aside)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        for_type_checkers = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        edges = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in for_type_checkers:
                continue
            names = _imported(node, module, path.name == "__init__.py")
            found = [name for name in names if name in modules]
            if found and isinstance(node, ast.ImportFrom):
                found = found[:-1] or found  # the submodules named, else the module
            for name in found:
                if name != module and modules[name].name != "__init__.py":
                    edges.add(name)
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_finder_sees_a_circle_made_by_a_lazy_import(tmp_path):
    package = tmp_path / "backend"
    (package / "jobs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "jobs" / "__init__.py").write_text("")
    (package / "jobs" / "actions.py").write_text(
        "def later():\n    from backend.jobs import tasks\n"
    )
    (package / "jobs" / "tasks.py").write_text("from backend.jobs.actions import later\n")
    (package / "jobs" / "models.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from backend.jobs import tasks\n"
    )

    graph = import_graph(backend_modules(package))

    assert circles(graph) == [["backend.jobs.actions", "backend.jobs.tasks"]]


def test_no_import_circle_among_backend_modules():
    graph = import_graph(backend_modules(ROOT / "backend"))

    assert (
        "backend.jobs.transitions" in graph["backend.jobmanager.deployment"]
    )  # the walk sees edges
    assert circles(graph) == []


# The job manager's layers, lowest first (the jobs app, then its shell, backend/jobmanager):
# each imports only from the layers below it.
JOB_LAYERS = [
    {"jobs.models", "core.job_manager_triggers"},
    {"jobs.transitions"},
    {"jobs.actions", "jobmanager.scheduling", "jobmanager.deployment", "jobmanager.node_sync"},
    {"jobmanager.reconcile"},
    {"jobmanager.manager"},
    {"jobmanager.tasks"},
]


def test_the_job_managers_layers_only_point_down():
    graph = import_graph(backend_modules(ROOT / "backend"))
    upward = []
    for level, layer in enumerate(JOB_LAYERS):
        above = set().union(*JOB_LAYERS[level + 1 :])
        for name in layer:
            upward += [
                f"{name} -> {imported}"
                for imported in sorted(graph[f"backend.{name}"])
                if imported.removeprefix("backend.") in above
            ]
    assert upward == []
