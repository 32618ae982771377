"""The *manager/ folders are the pure libraries: none imports the Django shell, Django or Celery."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("jobmanager", "repairmanager", "storagemanager")
SHELL = ("backend", "django", "celery", "rest_framework")


def imported_modules(path: Path) -> set[str]:
    """Every module the file imports, at the top or inside a function."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_library_imports_nothing_of_the_shell(library):
    offending = {
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / library).rglob("*.py")
        for module in imported_modules(path)
        if module.split(".")[0] in SHELL
    }
    assert not offending, sorted(offending)
