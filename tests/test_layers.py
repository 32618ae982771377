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


# The Django apps, lowest first: an app imports only the apps before it (and itself). The
# project's own modules (settings, urls, celery, wsgi) sit above them all.
APP_ORDER = (
    "core",
    "clusters",
    "vcs",
    "accounts",
    "storage",
    "jobs",
    "repairs",
    "jobmanager",
    "gateway",
    "monitoring",
    "operations",
)


def app_imports(app_dir: Path) -> set[tuple[str, str]]:
    """(module, imported backend module) for every module of the app, lazy imports counted."""
    found = set()
    for path in app_dir.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = path.relative_to(app_dir.parent.parent).with_suffix("").parts
        module = ".".join(parts).removesuffix(".__init__")
        found |= {(module, imported) for imported in imported_modules(path)}
    return found


def upward_imports(backend_dir: Path, order: tuple[str, ...]) -> set[str]:
    upward = set()
    for level, app in enumerate(order):
        above = set(order[level + 1 :])
        upward |= {
            f"{module} -> {imported}"
            for module, imported in app_imports(backend_dir / app)
            if imported.startswith("backend.") and imported.split(".")[1] in above
        }
    return upward


def test_the_order_names_every_app():
    apps = {path.parent.name for path in (ROOT / "backend").glob("*/__init__.py")}

    assert apps == set(APP_ORDER)


def test_the_finder_sees_an_upward_import_made_inside_a_function(tmp_path):
    for app, code in {
        "low": "def later():\n    from backend.high.models import Thing\n",
        "high": "from backend.low import models\n",
    }.items():
        (tmp_path / "backend" / app).mkdir(parents=True)
        (tmp_path / "backend" / app / "actions.py").write_text(code)

    assert upward_imports(tmp_path / "backend", ("low", "high")) == {
        "backend.low.actions -> backend.high.models"
    }


def test_apps_import_only_the_apps_below_them():
    upward = upward_imports(ROOT / "backend", APP_ORDER)

    assert sorted(upward) == [], "an app imports one above it"
